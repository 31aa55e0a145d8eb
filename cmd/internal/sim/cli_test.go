package sim

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// runMainAsync runs Main with args and returns the URL from
// its first stdout line; the returned func stops it and yields the exit code.
func runMainAsync(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	u, stop, err := Start(args)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, "http://127.0.0.1:") && !strings.HasPrefix(u, "https://127.0.0.1:") {
		stop()
		t.Fatalf("listening on %s, not 127.0.0.1", u)
	}
	return u, stop
}

// celflow-sim prints its address first, serves its roles and exits 0 when
// stopped; `celflow-sim gateway` routes to it.
func TestSimCommand(t *testing.T) {
	worker, stopW := runMainAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode", "--name", "w1", "--fault", "decode:status=503,times=1")
	gw, stopG := runMainAsync(t, "gateway", "--listen", "127.0.0.1:0", "--decode", worker)
	for i, want := range []int{503, 200} {
		req, _ := http.NewRequest(http.MethodPost, gw+"/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
		req.Header.Set("EPP-Profile", "decode")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	if c := stopG(); c != 0 {
		t.Errorf("gateway exit %d", c)
	}
	if c := stopW(); c != 0 {
		t.Errorf("worker exit %d", c)
	}
}

func TestSimCommandFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--roles", "render,cook"}, {"--fault", "explode"}, {"stray"}, {"--ttft", "-1s"}, {"--prefill-per-token", "-1ms"},
		{"gateway", "--decode", "ftp://x"}, {"gateway", "--bogus"},
	} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"--listen", "256.0.0.1:0"}, &out, &errb); code != 1 {
		t.Errorf("bad listen address: exit %d", code)
	}
}

// --deterministic makes every answer continuable (no temperature needed).
func TestSimCommandDeterministic(t *testing.T) {
	u, stop := runMainAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode", "--deterministic", "--output-tokens", "5")
	defer stop()
	a := ask(t, u, "/v1/completions", `{"prompt":"flag"}`)
	words := strings.Fields(a.text)
	if len(words) != 5 {
		t.Fatalf("answer %q", a.text)
	}
	for _, w := range words {
		if !slices.Contains(detVocab, w) {
			t.Errorf("%q is not deterministic vocabulary (answer %q)", w, a.text)
		}
	}
}
