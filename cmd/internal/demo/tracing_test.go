package demo

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"
)

// The demo honours the standard OTEL_* variables like `celflow serve`:
// with OTEL_EXPORTER_OTLP_ENDPOINT set, each request prints its trace id and
// the spans of that trace reach the OTLP/HTTP endpoint. Tracing is global
// state that cannot be uninstalled, so the demo runs in a child process
// (this test binary again, -test.run of the helper below).
func TestDemoExportsTraces(t *testing.T) {
	if os.Getenv("CELFLOW_DEMO_TRACE_CHILD") == "1" {
		t.Skip("the child runs the helper only")
	}
	var mu sync.Mutex
	var bodies [][]byte
	var contentTypes []string
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			bodies, contentTypes = append(bodies, b), append(contentTypes, r.Header.Get("Content-Type"))
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer otlp.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDemoTraceChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CELFLOW_DEMO_TRACE_CHILD=1",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+otlp.URL, "OTEL_TRACES_EXPORTER=", "OTEL_SDK_DISABLED=",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_EXPORTER_OTLP_PROTOCOL=", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	ids := regexp.MustCompile(`(?m)^   trace: ([0-9a-f]{32})$`).FindAllSubmatch(out, -1)
	if len(ids) != 4 {
		t.Fatalf("want a trace id for each of the 4 requests, got %d:\n%s", len(ids), out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) == 0 {
		t.Fatalf("nothing was exported to %s/v1/traces:\n%s", otlp.URL, out)
	}
	all := bytes.Join(bodies, nil)
	for _, m := range ids {
		raw, _ := hex.DecodeString(string(m[1]))
		// OTLP protobuf carries trace ids as 16 raw bytes.
		if !bytes.Contains(all, raw) {
			t.Errorf("trace %s is not in the exported spans", m[1])
		}
	}
	for _, want := range []string{"celflow demo: image chat", "try_decode", "encode[0]", "POST /v1/chat/completions"} {
		if !bytes.Contains(all, []byte(want)) {
			t.Errorf("no exported span named %q", want)
		}
	}
	for _, ct := range contentTypes {
		if ct != "application/x-protobuf" {
			t.Errorf("exported with Content-Type %q, want OTLP/HTTP protobuf", ct)
		}
	}
}

// TestDemoTraceChild is the child of TestDemoExportsTraces: the demo with
// the OTEL_* environment the parent set.
func TestDemoTraceChild(t *testing.T) {
	if os.Getenv("CELFLOW_DEMO_TRACE_CHILD") != "1" {
		t.Skip("run by TestDemoExportsTraces")
	}
	var out, errOut bytes.Buffer
	code := Run(Options{}, &out, &errOut)
	os.Stdout.Write(out.Bytes())
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut.String())
	}
}
