package fetchmedia

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
)

// Every image shape vLLM's chat parser reads (connectors/mm/testdata/
// vllm_shapes.json) is downloaded under the guard and rewritten to a data
// URI in a shape vLLM accepts: a typed part with a bare url string gets the
// object form, the others keep their own; offsets follow the edits. Before
// the scanner followed vLLM, the bare, typeless and input_image urls were
// left in the body untouched.
func TestFetchVLLMImageShapes(t *testing.T) {
	img := pngBytes(t, 8)
	srv := pngServer(t, img, "image/png")
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	u := srv.URL + "/cat.png"
	data := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img)
	cases := []struct{ part, want string }{
		{`{"type":"image_url","image_url":{"url":"` + u + `"}}`, `{"type":"image_url","image_url":{"url":"` + data + `"}}`},
		{`{"type":"image_url","image_url":"` + u + `"}`, `{"type":"image_url","image_url":{"url":"` + data + `"}}`},
		{`{"type":"input_image","image_url":"` + u + `","detail":"auto"}`, `{"type":"input_image","image_url":"` + data + `","detail":"auto"}`},
		{`{"image_url":"` + u + `"}`, `{"image_url":"` + data + `"}`},
		{`{"type":null,"image_url":{"url":"` + u + `"}}`, `{"type":null,"image_url":{"url":"` + data + `"}}`},
		{`{"type":"image_url","image_url":"` + u + `","uuid":"c"}`, `{"type":"image_url","image_url":{"url":"` + data + `"},"uuid":"c"}`},
	}
	parts := make([]string, len(cases))
	for i, c := range cases {
		parts[i] = c.part
	}
	res, st := run(t, n, chat(parts...))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if srv.count.Load() != 1 {
		t.Errorf("%d downloads of one url", srv.count.Load())
	}
	if strings.Contains(string(st.Body), u) || !json.Valid(st.Body) {
		t.Fatalf("body %.300s", st.Body)
	}
	if len(st.Media) != len(cases) {
		t.Fatalf("%d items", len(st.Media))
	}
	for i, it := range st.Media {
		if got := string(st.Body[it.PartStart:it.PartEnd]); got != cases[i].want {
			t.Errorf("part %d = %.120s, want %.120s", i, got, cases[i].want)
		}
		if !it.Remote || it.Type != "image/png" || it.Size != len(img) || it.Part != i {
			t.Errorf("item %+v", it)
		}
		if p, ok := mm.PartAt(st.Body, it.PartStart, it.PartEnd); !ok || !p.Inline(st.Body) {
			t.Errorf("part %d is not an inline image after the rewrite: %+v", i, p)
		}
	}
}

// A shape celflow cannot guard is refused before anything is fetched.
func TestFetchRefusedShape(t *testing.T) {
	srv := pngServer(t, pngBytes(t, 8), "image/png")
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	res, _ := run(t, n, chat(imagePart(srv.URL+"/a.png"), `{"type":"text","uuid":"u","image_url":"`+srv.URL+`/b.png"}`))
	e := wantErr(t, res, engine.KindInvalidRequest, "must not carry image_url")
	if e.Param != "messages[0].content[2]" || e.HTTPStatus() != 400 {
		t.Errorf("param %q status %d", e.Param, e.HTTPStatus())
	}
	if srv.count.Load() != 0 {
		t.Errorf("%d downloads", srv.count.Load())
	}
}
