package mm

import (
	"strings"
	"testing"
)

func TestParseTokenIDs(t *testing.T) {
	// ACCEPTANCE 101
	bad := []string{`null`, `{}`, `"1,2"`, `[]`, `[1,-2]`, `[1,2.5]`, `[1.0]`, `[1e19]`, `[1E2]`, `["1"]`, `[true]`, `[null]`, `[[1]]`, `[9223372036854775808]`, `[18446744073709551616]`}
	for _, b := range bad {
		if ids, err := ParseTokenIDs([]byte(b)); err == nil {
			t.Errorf("ParseTokenIDs(%s) = %v, want error", b, ids)
		}
	}
	good := map[string][]int64{
		`[1]`:                   {1},
		`[ 0 , 9000,17 ]`:       {0, 9000, 17},
		`[9223372036854775807]`: {9223372036854775807},
	}
	for in, want := range good {
		ids, err := ParseTokenIDs([]byte(in))
		if err != nil || len(ids) != len(want) {
			t.Fatalf("ParseTokenIDs(%s) = %v, %v", in, ids, err)
		}
		for i := range ids {
			if ids[i] != want[i] {
				t.Errorf("%s[%d] = %d, want %d", in, i, ids[i], want[i])
			}
		}
	}
}

// ACCEPTANCE 99, 105
func TestParseGenerateOK(t *testing.T) {
	cases := []struct {
		name   string
		body   string
		ntok   int
		items  []MediaItem
		tokens string
	}{
		{"text only", `{"model":"m","token_ids":[1, 2,3],"sampling_params":{"max_tokens":5}}`, 3, nil, `[1, 2,3]`},
		{"features null", `{"token_ids":[1,2],"features":null,"sampling_params":null}`, 2, nil, `[1,2]`},
		// ACCEPTANCE 103: extra_args may be an object.
		{"extra_args object", `{"token_ids":[1,2],"sampling_params":{"temperature":0.2,"extra_args":{"k":[1]}}}`, 2, nil, `[1,2]`},
		{"one image, no kwargs: cache hit", `{"token_ids":[1,9,9,9,17],"features":{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":3}]}}}`, 5,
			[]MediaItem{{Index: 0, Modality: "image", Part: 0, Hash: "h0", Offset: 1, Length: 3, Kwargs: []byte("null"), HasFeatures: true}}, ""},
		{"two images, mixed kwargs", `{"token_ids":[1,9,9,8,8,8],"sampling_params":{"extra_args":null},"features":{"mm_hashes":{"image":["a","b"]},` +
			`"mm_placeholders":{"image":[{"offset":1,"length":2},{"offset":3,"length":3,"is_embed":null}]},"kwargs_data":{"image":["QUJD",null]}}}`, 6,
			[]MediaItem{
				{Index: 0, Modality: "image", Part: 0, Hash: "a", Offset: 1, Length: 2, Kwargs: []byte(`"QUJD"`), HasFeatures: true},
				{Index: 1, Modality: "image", Part: 1, Hash: "b", Offset: 3, Length: 3, Kwargs: []byte("null"), HasFeatures: true},
			}, ""},
		{"image and video, empty modality", `{"token_ids":[1,2,3,4],"features":{"mm_hashes":{"video":["v"],"image":["i"],"audio":[]},` +
			`"mm_placeholders":{"image":[{"offset":0,"length":4}],"video":[{"offset":3,"length":0}],"audio":[]}}}`, 4,
			[]MediaItem{
				{Index: 0, Modality: "video", Part: 0, Hash: "v", Offset: 3, Length: 0, Kwargs: []byte("null"), HasFeatures: true},
				{Index: 1, Modality: "image", Part: 0, Hash: "i", Offset: 0, Length: 4, Kwargs: []byte("null"), HasFeatures: true},
			}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, items, err := ParseGenerate([]byte(c.body), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tok.Known || len(tok.IDs) != c.ntok || tok.FromRender {
				t.Fatalf("tokens %+v", tok)
			}
			if c.tokens != "" && string(tok.JSON) != c.tokens {
				t.Errorf("JSON %s, want %s", tok.JSON, c.tokens)
			}
			if len(items) != len(c.items) {
				t.Fatalf("items %+v", items)
			}
			for i := range items {
				g, w := items[i], c.items[i]
				if g.Index != w.Index || g.Modality != w.Modality || g.Part != w.Part || g.Hash != w.Hash ||
					g.Offset != w.Offset || g.Length != w.Length || string(g.Kwargs) != string(w.Kwargs) || !g.HasFeatures {
					t.Errorf("item %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// ACCEPTANCE 100–104
func TestParseGenerateRejects(t *testing.T) {
	ph := func(s string) string {
		return `{"token_ids":[1,2,3,4],"features":{"mm_hashes":{"image":["a","b"]},"mm_placeholders":{"image":` + s + `}}}`
	}
	cases := []struct{ name, body, msg string }{
		{"no token_ids", `{"model":"m"}`, "token_ids: required"},
		{"token_ids null", `{"token_ids":null}`, "token_ids"},
		{"token_ids empty", `{"token_ids":[]}`, "token_ids"},
		{"token_ids negative", `{"token_ids":[1,-1]}`, "token_ids[1]"},
		{"token_ids 1e19", `{"token_ids":[1e19]}`, "token_ids[0]"},
		{"token_ids bool", `{"token_ids":[true]}`, "token_ids[0]"},
		{"token_ids string", `{"token_ids":"1 2"}`, "token_ids"},
		{"features string", `{"token_ids":[1],"features":"x"}`, "features: must be an object"},
		{"features array", `{"token_ids":[1],"features":[]}`, "features: must be an object"},
		{"features number", `{"token_ids":[1],"features":3}`, "features: must be an object"},
		{"mm_hashes array", `{"token_ids":[1],"features":{"mm_hashes":[]}}`, "features.mm_hashes: must be an object"},
		{"hashes not array", `{"token_ids":[1],"features":{"mm_hashes":{"image":"a"}}}`, "features.mm_hashes.image: must be an array"},
		{"hash not string", `{"token_ids":[1],"features":{"mm_hashes":{"image":[1]}}}`, "features.mm_hashes.image[0]: must be a string"},
		{"hashes without placeholders", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["a"]}}}`, "features.mm_placeholders.image: required"},
		{"placeholder count", ph(`[{"offset":0,"length":1}]`), "has 1 entries, mm_hashes.image has 2"},
		{"placeholder not object", ph(`[{"offset":0,"length":1},3]`), "mm_placeholders.image[1]: must be an object"},
		{"negative offset", ph(`[{"offset":-1,"length":1},{"offset":0,"length":1}]`), "mm_placeholders.image[0].offset"},
		{"negative length", ph(`[{"offset":0,"length":-1},{"offset":0,"length":1}]`), "mm_placeholders.image[0].length"},
		{"fraction offset", ph(`[{"offset":0.5,"length":1},{"offset":0,"length":1}]`), "offset"},
		{"missing length", ph(`[{"offset":0},{"offset":0,"length":1}]`), "length: required"},
		{"offset at count", ph(`[{"offset":4,"length":0},{"offset":0,"length":1}]`), "outside the prompt"},
		{"span one past end", ph(`[{"offset":1,"length":4},{"offset":0,"length":1}]`), "ends past the prompt"},
		{"huge length 2^53", ph(`[{"offset":1,"length":9007199254740992},{"offset":0,"length":1}]`), "ends past the prompt"},
		{"length beyond int64", ph(`[{"offset":1,"length":99999999999999999999},{"offset":0,"length":1}]`), "out of range"},
		{"bad second entry", ph(`[{"offset":0,"length":1},{"offset":9,"length":1}]`), "mm_placeholders.image[1]"},
		{"kwargs count", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["a"]},"mm_placeholders":{"image":[{"offset":0,"length":1}]},"kwargs_data":{"image":["x","y"]}}}`, "kwargs_data.image: has 2 entries"},
		{"kwargs item number", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["a"]},"mm_placeholders":{"image":[{"offset":0,"length":1}]},"kwargs_data":{"image":[3]}}}`, "kwargs_data.image[0]: must be a string or null"},
		{"kwargs_data array", `{"token_ids":[1,2],"features":{"kwargs_data":[]}}`, "features.kwargs_data: must be an object"},
		{"placeholders without hashes", `{"token_ids":[1,2],"features":{"mm_placeholders":{"image":[{"offset":0,"length":1}]}}}`, "has 1 entries, mm_hashes.image has 0"},
		{"sampling_params array", `{"token_ids":[1],"sampling_params":[]}`, "sampling_params: must be an object or null"},
		{"sampling_params string", `{"token_ids":[1],"sampling_params":"x"}`, "sampling_params: must be an object or null"},
		{"extra_args array", `{"token_ids":[1],"sampling_params":{"extra_args":[]}}`, "sampling_params.extra_args"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ParseGenerate([]byte(c.body), nil)
			if err == nil {
				t.Fatal("accepted")
			}
			if e := asErr(err); e.Kind != BadRequest || !strings.Contains(e.Msg, c.msg) {
				t.Errorf("err %v (kind %v), want BadRequest with %q", err, e.Kind, c.msg)
			}
		})
	}
}

func TestParseGenerateSpans(t *testing.T) {
	// ACCEPTANCE 104: a span filling the prompt, an end equal to the count
	// and a length-0 span inside are accepted.
	ok := []string{`{"offset":0,"length":4}`, `{"offset":2,"length":2}`, `{"offset":3,"length":0}`}
	for _, s := range ok {
		body := `{"token_ids":[1,2,3,4],"features":{"mm_hashes":{"image":["a"]},"mm_placeholders":{"image":[` + s + `]}}}`
		if _, _, err := ParseGenerate([]byte(body), nil); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

func TestParseGenerateNotObject(t *testing.T) {
	_, _, err := ParseGenerate([]byte(`[1]`), nil)
	if err == nil || asErr(err).Kind != NotJSON {
		t.Fatalf("err %v", err)
	}
}
