package sim

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// runMainAsync runs Main with args and returns the URL from
// its first stdout line; the returned func stops it and yields the exit code.
func runMainAsync(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, args, pw, &stderr)
		pw.Close()
	}()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		lines <- line
		io.Copy(io.Discard, pr)
	}()
	select {
	case line := <-lines:
		u, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
		if !ok || !strings.HasPrefix(u, "http://127.0.0.1:") && !strings.HasPrefix(u, "https://127.0.0.1:") {
			cancel()
			t.Fatalf("first line %q (stderr %q)", line, stderr.String())
		}
		return u, func() int { cancel(); return <-code }
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("no listening line within 10s")
	}
	return "", nil
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
		{"--roles", "render,cook"}, {"--fault", "explode"}, {"stray"}, {"--ttft", "-1s"},
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
