package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Issue 12 through `celflow serve`: the admission section reaches the
// front (429 with Retry-After at the bound), the metrics count it, and a
// SIGHUP applies a new bound without losing the in-flight count.
func TestServeAdmission(t *testing.T) {
	entered, release := make(chan struct{}, 4), make(chan struct{})
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"gw":"ok"}`)
	}))
	defer gw.Close()
	defer close(release)
	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", decodeOnly("adm", "1"))
	cfg := func(bound int) string {
		return serveConfig(gw.URL, listen) + "admission: {max_in_flight: " + strconv.Itoa(bound) + ", retry_after: 2s}\n"
	}
	cfgPath := writeFile(t, dir, "serve.yaml", cfg(1))
	hup := make(chan os.Signal, 1)
	addr, logs := startServeHUP(t, cfgPath, noEnv, hup)

	done := make(chan int, 2)
	hold := func() {
		go func() { code, _ := chat(t, addr); done <- code }()
		<-entered
	}
	hold()
	const inFlight = `celflow_admission_in_flight{route="/v1/chat/completions"}`
	waitMetric(t, addr, inFlight, 1, logs)
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || !strings.Contains(string(body), `"code":"overloaded"`) {
		t.Fatalf("at the bound: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if v := metric(t, addr, `celflow_admission_rejected_total{reason="queue_full",route="/v1/chat/completions"}`); v != 1 {
		t.Errorf("rejected queue_full = %v", v)
	}

	writeFile(t, dir, "serve.yaml", cfg(2))
	hup <- syscall.SIGHUP
	waitMetric(t, addr, "celflow_admission_max_in_flight", 2, logs)
	hold() // admitted under the new bound, next to the one still in flight
	waitMetric(t, addr, inFlight, 2, logs)
	release <- struct{}{}
	release <- struct{}{}
	for range 2 {
		if code := <-done; code != 200 {
			t.Errorf("held request: %d", code)
		}
	}
}
