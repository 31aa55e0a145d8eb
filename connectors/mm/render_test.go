package mm

import (
	"errors"
	"strings"
	"testing"
)

func items(mods ...string) []MediaItem {
	var out []MediaItem
	count := map[string]int{}
	for i, m := range mods {
		out = append(out, MediaItem{Index: i, Modality: m, Part: count[m], Type: m + "/x", PartStart: 10 * i})
		count[m]++
	}
	return out
}

// ACCEPTANCE 86, 98, 105
func TestParseRenderChat(t *testing.T) {
	resp := `{"request_id":"r","token_ids":[1,9000,9000,7000,7000,7000,8000,17,18],"features":{` +
		`"mm_hashes":{"image":["i0","i1"],"video":["v0"]},` +
		`"mm_placeholders":{"image":[{"offset":1,"length":2},{"offset":6,"length":1}],"video":[{"offset":3,"length":3}]},` +
		`"kwargs_data":{"image":["K0",null],"video":["KV"]}},"kv_transfer_params":null}`
	media := items("image", "video", "image")
	tok, out, err := ParseRenderChat([]byte(resp), media)
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Known || !tok.FromRender || len(tok.IDs) != 9 || tok.IDs[0] != 1 || string(tok.JSON) != `[1,9000,9000,7000,7000,7000,8000,17,18]` {
		t.Fatalf("tokens %+v", tok)
	}
	want := []struct {
		hash     string
		off, len int
		kw       string
	}{{"i0", 1, 2, `"K0"`}, {"v0", 3, 3, `"KV"`}, {"i1", 6, 1, `null`}}
	for i, w := range want {
		g := out[i]
		if g.Hash != w.hash || g.Offset != w.off || g.Length != w.len || string(g.Kwargs) != w.kw || !g.HasFeatures {
			t.Errorf("item %d = %+v, want %+v", i, g, w)
		}
		if g.Type != media[i].Type || g.PartStart != media[i].PartStart {
			t.Errorf("item %d lost fetch-media fields: %+v", i, g)
		}
	}
	if media[0].HasFeatures {
		t.Error("input slice was modified")
	}
}

func TestParseRenderChatVariants(t *testing.T) {
	cases := []struct {
		name  string
		resp  string
		media []MediaItem
		err   string // "" = success
		kw    string // kwargs of item 0 on success
		feats bool
	}{
		{"text only, features absent", `{"token_ids":[1,2]}`, nil, "", "", false},
		{"features absent with items", `{"token_ids":[1,2]}`, items("image"), "", "", false},
		{"features null", `{"token_ids":[1,2],"features":null}`, items("image"), "", "", false},
		{"kwargs_data absent: cache hits", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]}}}`, items("image"), "", "null", true},
		{"kwargs_data null", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]},"kwargs_data":null}}`, items("image"), "", "null", true},
		// ACCEPTANCE 96
		{"text-only chat, one image hash", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]}}}`, nil, "1 image item(s), the request has 0", "", false},
		{"two images, one hash", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]}}}`, items("image", "image"), "1 image item(s), the request has 2", "", false},
		{"kwargs short", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]},"kwargs_data":{"image":[]}}}`, items("image"), "kwargs_data.image: has 0 entries", "", false},
		{"kwargs modality missing", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]},"kwargs_data":{"video":[]}}}`, items("image"), "kwargs_data.image: missing", "", false},
		{"span outside T", `{"token_ids":[1,2],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]}}}`, items("image"), "ends past the prompt", "", false},
		{"no token_ids", `{"features":null}`, nil, "no token_ids", "", false},
		{"bad token_ids", `{"token_ids":[1.5]}`, nil, "token_ids[0]", "", false},
		{"array reply", `[{"token_ids":[1]}]`, nil, "not one JSON object", "", false},
		{"repeated name", `{"token_ids":[1],"features":{"mm_hashes":{"image":["a"],"image":["b"]}}}`, nil, "repeats the member name features.mm_hashes.image", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, out, err := ParseRenderChat([]byte(c.resp), c.media)
			if c.err != "" {
				if e := asErr(err); e.Kind != BadReply || !strings.Contains(e.Msg, c.err) {
					t.Fatalf("err = %v, want protocol error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(c.media) {
				t.Fatalf("items %d", len(out))
			}
			if len(out) > 0 {
				if out[0].HasFeatures != c.feats || (c.feats && string(out[0].Kwargs) != c.kw) {
					t.Errorf("item %+v", out[0])
				}
			}
		})
	}
}

// ACCEPTANCE 89, 90
func TestParseRenderCompletions(t *testing.T) {
	tok, err := ParseRenderCompletions([]byte(` [ {"token_ids":[1,5,6],"features":null,"request_id":"x"} ] `))
	if err != nil || !tok.Known || !tok.FromRender || string(tok.JSON) != `[1,5,6]` || len(tok.IDs) != 3 {
		t.Fatalf("tok %+v err %v", tok, err)
	}
	for _, bad := range []string{`[]`, `[{"token_ids":[1]},{"token_ids":[2]}]`, `[{"token_ids":[1]},1,2]`, `{"token_ids":[1]}`, `[1]`, `[{"x":1}]`, `[{"token_ids":[]}]`, `not json`} {
		_, err := ParseRenderCompletions([]byte(bad))
		if asErr(err).Kind != BadReply {
			t.Errorf("%s: err %v", bad, err)
		}
	}
}

// ACCEPTANCE 88, 91, 92
func TestParseCompletionsPrompt(t *testing.T) {
	k, tok, err := ParseCompletionsPrompt([]byte(`{"prompt":"hello"}`), nil)
	if err != nil || k != PromptString || tok.Known {
		t.Fatalf("string prompt: %v %+v %v", k, tok, err)
	}
	k, tok, err = ParseCompletionsPrompt([]byte(`{"prompt":[1, 2,3],"max_tokens":3}`), nil)
	if err != nil || k != PromptTokens || !tok.Known || tok.FromRender || string(tok.JSON) != `[1, 2,3]` {
		t.Fatalf("token prompt: %v %+v %v", k, tok, err)
	}
	bad := map[string]string{
		`{"prompt":["a","b"]}`:   "batched",
		`{"prompt":[[1,2],[3]]}`: "batched",
		`{"prompt":5}`:           "must be a string or an array",
		`{"prompt":{"a":1}}`:     "must be a string or an array",
		`{"prompt":null}`:        "must be a string or an array",
		`{"model":"m"}`:          "prompt: required",
		`{"prompt":[1,-2]}`:      "prompt[1]",
		`{"prompt":[1,2.5]}`:     "prompt[1]",
		`{"prompt":[1,"x"]}`:     "prompt[1]",
		`{"prompt":[]}`:          "must not be empty",
		`{"prompt":[ ]}`:         "must not be empty",
	}
	for body, msg := range bad {
		_, _, err := ParseCompletionsPrompt([]byte(body), nil)
		if e := asErr(err); e.Kind != BadRequest || !strings.Contains(e.Msg, msg) {
			t.Errorf("%s: err %v, want %q", body, err, msg)
		}
	}
}

// ACCEPTANCE 93, 94
func TestCheckLimits(t *testing.T) {
	ten := Tokens{Known: true, IDs: make([]int64, 10)}
	withLen := func(ls ...int) []MediaItem {
		var out []MediaItem
		for _, l := range ls {
			out = append(out, MediaItem{Modality: "image", Length: l, HasFeatures: true})
		}
		return out
	}
	const maxInt = int(^uint(0) >> 1)
	cases := []struct {
		name      string
		tok       Tokens
		media     []MediaItem
		total, ph int64
		want      []string
	}{
		{"off", ten, withLen(7), 0, 0, nil},
		{"total over", ten, nil, 5, 0, []string{"too many total tokens", "got 10", "max 5"}},
		{"total equal", ten, nil, 10, 0, nil},
		{"placeholders 7 over 5", ten, withLen(3, 4), 0, 5, []string{"too many placeholder tokens", "got 7", "max 5"}},
		{"placeholders 5 at 5", ten, withLen(2, 3), 0, 5, nil},
		{"placeholders overflow", ten, withLen(maxInt, maxInt, 1), 0, 5, []string{"too many placeholder tokens", "max 5"}},
		{"unknown T", Tokens{}, nil, 1, 0, nil},
	}
	for _, c := range cases {
		err := CheckLimits(c.tok, c.media, c.total, c.ph)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		e := asErr(err)
		if e.Kind != BadRequest {
			t.Errorf("%s: err %v", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(e.Msg, w) {
				t.Errorf("%s: %q lacks %q", c.name, e.Msg, w)
			}
		}
	}
}

// asErr returns err as an *Error, or a zero Error (Kind 0) for anything else.
func asErr(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{}
}
