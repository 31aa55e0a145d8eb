package mm

import (
	"encoding/json"
	"testing"
)

func TestChatTokensJSON(t *testing.T) {
	tok := Tokens{Known: true, IDs: []int64{1, 9000, 9000, 9000, 17, 18}, JSON: []byte(`[1,9000,9000,9000,17,18]`)}
	img := MediaItem{Modality: "image", Hash: "h0", Offset: 1, Length: 3, Kwargs: []byte(`"KW"`), HasFeatures: true}
	cases := []struct {
		name  string
		tok   Tokens
		media []MediaItem
		want  string
	}{
		{"unknown T", Tokens{}, []MediaItem{img}, ""},
		{"text only", tok, nil, `{"token_ids":[1,9000,9000,9000,17,18]}`},
		{"items without features", tok, []MediaItem{{Modality: "image"}}, `{"token_ids":[1,9000,9000,9000,17,18]}`},
		{"one image, no kwargs", tok, []MediaItem{img}, `{"token_ids":[1,9000,9000,9000,17,18],"features":{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":3}]}}}`},
		{"ids without JSON", Tokens{Known: true, IDs: []int64{1, 2}}, nil, `{"token_ids":[1,2]}`},
	}
	for _, c := range cases {
		got := ChatTokensJSON(c.tok, c.media)
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestFeaturesJSON(t *testing.T) {
	media := []MediaItem{
		{Modality: "video", Hash: "v0", Offset: 5, Length: 2, Kwargs: []byte(`"V"`), HasFeatures: true},
		{Modality: "image", Hash: "i\"0", Offset: 1, Length: 3, Kwargs: []byte(`null`), HasFeatures: true},
		{Modality: "image", Hash: "i1", Offset: 8, Length: 1, HasFeatures: true},
	}
	want := `{"mm_hashes":{"video":["v0"],"image":["i\"0","i1"]},"mm_placeholders":{"video":[{"offset":5,"length":2}],"image":[{"offset":1,"length":3},{"offset":8,"length":1}]},` +
		`"kwargs_data":{"video":["V"],"image":[null,null]}}`
	if got := FeaturesJSON(media, true); string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if FeaturesJSON(nil, true) != nil || FeaturesJSON([]MediaItem{{Modality: "image"}}, false) != nil {
		t.Error("features without items")
	}
	if !json.Valid(FeaturesJSON(media, false)) {
		t.Error("invalid JSON")
	}
}

// ACCEPTANCE 124
func TestItemTokens(t *testing.T) {
	tok := Tokens{Known: true, IDs: []int64{1, 9000, 9000, 9000, 17, 18, 7000, 7000}}
	it := MediaItem{Modality: "image", Hash: "h0", Offset: 1, Length: 3, Kwargs: []byte(`"KW"`), HasFeatures: true}
	ids, err := ItemTokensJSON(tok, &it)
	if err != nil || string(ids) != `[1,9000,9000,9000]` {
		t.Fatalf("ids %s err %v", ids, err)
	}
	it2 := MediaItem{Modality: "image", Hash: "h1", Offset: 6, Length: 2, HasFeatures: true}
	if ids, _ := ItemTokensJSON(tok, &it2); string(ids) != `[1,7000,7000]` {
		t.Errorf("second item ids %s", ids)
	}
	if got := string(ItemFeaturesJSON(&it, false)); got != `{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":3}]}}` {
		t.Errorf("features %s", got)
	}
	if got := string(ItemFeaturesJSON(&it2, true)); got != `{"mm_hashes":{"image":["h1"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]},"kwargs_data":{"image":[null]}}` {
		t.Errorf("features with kwargs %s", got)
	}
	chat, err := ItemChatTokensJSON(tok, &it)
	if err != nil || string(chat) != `{"token_ids":[1,9000,9000,9000],"features":{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":3}]}}}` {
		t.Errorf("chat tokens %s err %v", chat, err)
	}
	for _, bad := range []MediaItem{{Modality: "image"}, {Modality: "image", Offset: 8, Length: 0, HasFeatures: true}, {Modality: "image", Offset: 7, Length: 2, HasFeatures: true}} {
		if _, err := ItemTokensJSON(tok, &bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := ItemTokensJSON(Tokens{}, &it); err == nil {
		t.Error("unknown T accepted")
	}
}
