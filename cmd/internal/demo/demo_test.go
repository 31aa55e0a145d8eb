package demo

import (
	"bytes"
	"context"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
	_ "github.com/celflow/celflow/nodes/all"
	"github.com/celflow/celflow/workflows"
)

// The demo in both upstream modes: every request takes its expected path
// (Run checks the engine reports), the output shows each node and each
// worker leg, and the exit code is 0. ACCEPTANCE 36, 37, 53.
func TestDemoRunsInBothModes(t *testing.T) {
	for _, gateway := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "gateway"}[gateway]
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Run(Options{Stack: StackOptions{Gateway: gateway}}, &out, &errOut)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
			}
			s := out.String()
			for _, want := range []string{
				"[1/4] text chat", "[2/4] the same text again", "[3/4] image chat", "[4/4] streaming chat",
				"try_decode  answered", "prefix miss: the 412 edge takes the full path",
				"encode   POST /v1/chat/completions", "EPP-Profile: prefill", "SSE chunks)",
				"all 4 requests took the expected path",
			} {
				if !strings.Contains(s, want) {
					t.Errorf("output lacks %q:\n%s", want, s)
				}
			}
			if gateway && !strings.Contains(s, "answered by the gateway itself") {
				t.Errorf("gateway mode: the gateway's 412 is not shown:\n%s", s)
			}
			if !gateway && !strings.Contains(s, "picker predicted the prefix miss") {
				t.Errorf("direct mode: the predicted miss is not shown:\n%s", s)
			}
		})
	}
}

// ACCEPTANCE 56: the in-process stack with direct pools turns /readyz 200
// (Start waits for it); Close drains and returns 0.
func TestStackReadyAndClose(t *testing.T) {
	st, err := Start(StackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(st.Celflow.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %d", resp.StatusCode)
	}
	if code := st.Close(); code != 0 {
		t.Errorf("Close: exit %d, want 0", code)
	}
}

func TestWorkflowOverrides(t *testing.T) {
	src, err := Workflow("epd.yaml", Overrides{RenderAddress: "http://127.0.0.1:1234", AllowLoopback: true,
		Params: map[string]map[string]any{"decode": {"ttfb_timeout": "1s"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	for _, want := range []string{"address: http://127.0.0.1:1234", "allow_loopback: true", "ttfb_timeout: 1s", "tests:"} {
		if !strings.Contains(s, want) {
			t.Errorf("rewritten workflow lacks %q:\n%s", want, s)
		}
	}
	orig, _ := workflows.FS.ReadFile("epd.yaml")
	if strings.Contains(string(orig), "allow_loopback") {
		t.Error("the shipped epd.yaml must not allow loopback")
	}
	w, ds := engine.Load("epd.yaml", src, engine.LoadOptions{})
	if w == nil {
		t.Fatalf("rewritten workflow does not load:\n%s", ds.String())
	}
	if ds := w.RunTests(context.Background()); len(ds) > 0 {
		t.Errorf("rewritten workflow's tests fail:\n%s", ds.String())
	}
	if _, err := Workflow("nope.yaml", Overrides{}); err == nil {
		t.Error("an unknown workflow must be an error")
	}
	if _, err := Workflow("pd.yaml", Overrides{Params: map[string]map[string]any{"nope": {"a": 1}}}); err == nil {
		t.Error("params for an unknown node must be an error")
	}
	// A workflow without render or fetch-media is unchanged in substance.
	if src, err := Workflow("pd.yaml", Overrides{RenderAddress: "http://x:1", AllowLoopback: true}); err != nil ||
		strings.Contains(string(src), "http://x:1") || strings.Contains(string(src), "allow_loopback") {
		t.Errorf("pd.yaml gained overrides it has no node for (err %v)", err)
	}
}

// testdata/media/sample.png is SamplePNG(SampleWidth, SampleHeight), for
// curl users; the demo and the tests build it in code.
func TestSamplePNG(t *testing.T) {
	b := SamplePNG(SampleWidth, SampleHeight)
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r := img.Bounds(); r.Dx() != SampleWidth || r.Dy() != SampleHeight {
		t.Errorf("bounds %v", r)
	}
	if !bytes.Equal(b, SamplePNG(SampleWidth, SampleHeight)) {
		t.Error("SamplePNG is not deterministic")
	}
	if bytes.Equal(b, SamplePNG(SampleWidth+1, SampleHeight)) {
		t.Error("different sizes give the same bytes")
	}
	file := filepath.Join("..", "..", "..", "testdata", "media", "sample.png")
	if os.Getenv("CELFLOW_UPDATE_MEDIA") == "1" {
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(got, b) {
		t.Errorf("%s differs from SamplePNG (err %v); regenerate with CELFLOW_UPDATE_MEDIA=1 go test ./cmd/internal/demo -run TestSamplePNG", file, err)
	}
}

func TestMediaServer(t *testing.T) {
	m := NewMediaServer()
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/sample.png", 200}, {"/gradient/10x20.png", 200}, {"/gradient/0x20.png", 404},
		{"/gradient/2000x1.png", 404}, {"/gradient/abc.png", 404}, {"/other", 404},
	} {
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		if rec.Code != c.status {
			t.Errorf("%s: %d, want %d", c.path, rec.Code, c.status)
		}
		if c.status == 200 && rec.Header().Get("Content-Type") != "image/png" {
			t.Errorf("%s: content type %q", c.path, rec.Header().Get("Content-Type"))
		}
	}
	if m.Hits() != 2 {
		t.Errorf("hits %d, want 2", m.Hits())
	}
}

func TestReportsWaitIsBounded(t *testing.T) {
	r := newReports()
	r.Expect("x")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, ok := r.Wait(ctx, "x"); ok {
		t.Error("Wait returned an observation nobody made")
	}
	if _, ok := r.Wait(context.Background(), "unknown"); ok {
		t.Error("Wait on an id never expected must return at once")
	}
}
