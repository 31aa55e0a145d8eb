//go:build jaeger

package jaegertest_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/celflow/celflow/.ci/tools/jaegertest"
	"github.com/celflow/celflow/.ci/tools/proctest"
)

// roles are the simulated workers, one process each, so each record says
// which leg it was.
var roles = []string{"render", "encode", "prefill", "decode"}

// stack is Jaeger, four simulated workers, the simulated Inference Gateway
// and `celflow serve` in gateway mode exporting its spans to Jaeger, all
// real processes on 127.0.0.1.
type stack struct {
	t       *testing.T
	jaeger  *jaegertest.Jaeger
	workers map[string]string // role → http://127.0.0.1:PORT
	gateway string
	celflow string // celflow's base URL
	hash    string // the workflow's content hash, from serve's "workflow loaded" line
}

var (
	listeningRe = regexp.MustCompile(`^out: listening on (http://127\.0\.0\.1:\d+)$`)
	servingRe   = regexp.MustCompile(`"listen":"(127\.0\.0\.1:\d+)".*"msg":"celflow is serving"`)
	hashRe      = regexp.MustCompile(`"hash":"([0-9a-f]+)".*"msg":"workflow loaded"`)
)

// repoRoot is the repository root (this file is .ci/tools/jaegertest/stack_test.go).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

func startStack(t *testing.T, ctx context.Context, jaegerBin, celflowBin, simBin string) *stack {
	t.Helper()
	opts := jaegertest.Options{Bin: jaegerBin}
	if testing.Verbose() {
		opts.Log = os.Stderr
	}
	j, err := jaegertest.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := j.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("--- jaeger output:\n%s", j.Output())
		}
	})
	st := &stack{t: t, jaeger: j, workers: map[string]string{}}
	dir := t.TempDir()
	for _, r := range roles {
		st.workers[r] = startSim(t, simBin, r, "--listen", "127.0.0.1:0", "--roles", r, "--name", r,
			"--shared-dir", filepath.Join(dir, "kv"))
	}
	st.gateway = startSim(t, simBin, "gateway", "gateway", "--listen", "127.0.0.1:0",
		"--encode", st.workers["encode"], "--prefill", st.workers["prefill"], "--decode", st.workers["decode"])

	// The shipped workflow, unedited; the render address comes from the
	// serve config (upstream.render).
	cfg := fmt.Sprintf(`server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 5s}
upstream:
  mode: gateway
  gateway: %s
  render: %s
telemetry: {log_level: info, log_format: json}
workflow: %s
`, st.gateway, st.workers["render"], filepath.Join(repoRoot(), "workflows", "epd.yaml"))
	cfgPath := filepath.Join(dir, "celflow.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := proctest.Start(t, "celflow serve", celflowBin, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLPHTTPEndpoint(),
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_SERVICE_NAME=celflow",
		"OTEL_BSP_SCHEDULE_DELAY=100", // milliseconds: spans reach Jaeger soon after the request
	}, "serve", "--config", cfgPath)
	addr, err := p.WaitLine(servingRe, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.hash, err = p.WaitLine(hashRe, time.Second); err != nil {
		t.Fatal(err)
	}
	st.celflow = "http://" + addr
	st.waitReady(10 * time.Second)
	return st
}

// startSim starts one celflow-sim (or `celflow-sim gateway`) and returns its URL.
func startSim(t *testing.T, bin, name string, args ...string) string {
	t.Helper()
	u, err := proctest.Start(t, name, bin, nil, args...).WaitLine(listeningRe, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// httpc talks to the stack; it never uses a proxy.
var httpc = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}

func (st *stack) waitReady(within time.Duration) {
	st.t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := httpc.Get(st.celflow + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("/readyz not 200 within %s (last: %v)", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chat posts body to /v1/chat/completions with x-request-id id and the
// client's traceparent, and returns the status and body.
func (st *stack) chat(id, traceparent string, body []byte) (int, []byte) {
	st.t.Helper()
	req, err := http.NewRequest(http.MethodPost, st.celflow+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		st.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	req.Header.Set("Traceparent", traceparent)
	resp, err := httpc.Do(req)
	if err != nil {
		st.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		st.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// record is one request a simulator received (GET /sim/records).
type record struct {
	Worker  string      `json:"worker"`
	Role    string      `json:"role"`
	Path    string      `json:"path"`
	Headers http.Header `json:"headers"`
	Status  int         `json:"status"`
	Done    bool        `json:"done"`
}

// records returns what the simulator at base received for request id,
// once every such record is final (bounded wait).
func (st *stack) records(base, id string) []record {
	st.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var page struct {
			Records []record `json:"records"`
		}
		resp, err := httpc.Get(base + "/sim/records?since=0")
		if err != nil {
			st.t.Fatalf("records of %s: %v", base, err)
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&page)
		resp.Body.Close()
		if err != nil {
			st.t.Fatalf("records of %s: %v", base, err)
		}
		var out []record
		done := true
		for _, r := range page.Records {
			if r.Headers.Get("X-Request-Id") == id {
				out = append(out, r)
				done = done && r.Done
			}
		}
		if done || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pngDataURI is a small real PNG (a 16×16 gradient) as a data URI.
func pngDataURI(t *testing.T) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for y := range 16 {
		for x := range 16 {
			img.Set(x, y, color.RGBA{R: uint8(x * 16), G: uint8(y * 16), B: 128, A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// hostOf is the scheme://host:port of a URL, for comparing upstream URLs.
func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Scheme + "://" + p.Host
}
