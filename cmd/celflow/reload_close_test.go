package main

import (
	"bytes"
	"image"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mediaHost serves one PNG and counts its open connections on the server
// side: what celflow really keeps open, whatever its transports claim.
type mediaHost struct {
	*httptest.Server
	mu   sync.Mutex
	open map[net.Conn]bool
}

func newMediaHost(t *testing.T) *mediaHost {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 8, 8))); err != nil {
		t.Fatal(err)
	}
	img := buf.Bytes()
	h := &mediaHost{open: map[net.Conn]bool{}}
	h.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(img)
	}))
	h.Config.ConnState = func(c net.Conn, st http.ConnState) {
		h.mu.Lock()
		defer h.mu.Unlock()
		switch st {
		case http.StateNew:
			h.open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(h.open, c)
		}
	}
	h.Start()
	t.Cleanup(h.Close)
	return h
}

// waitClosed waits (5 s at most) until no connection to h is open; who
// names the generation that should have closed them.
func (h *mediaHost) waitClosed(t *testing.T, who string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.conns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds %d connections to the media host", who, h.conns())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *mediaHost) conns() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.open)
}

const mediaWorkflow = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: media, version: "1"}
nodes:
  - id: fetch
    type: fetch-media
    params: {allow_loopback: true}
  - id: decode
    type: decode
    needs: [fetch]
`

// A generation is closed once it is replaced and its requests are done:
// the fetch-media transport of the old workflow drops its idle connections
// to the media host (counted on the host), where before they stayed open
// until their idle timeout, for every reload. A rejected reload's build is
// closed as well and leaves the live one's connections alone.
func TestServeReloadClosesOldGeneration(t *testing.T) {
	gw := gateway(t, "a")
	media := newMediaHost(t)
	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", mediaWorkflow)
	cfgPath := writeFile(t, dir, "serve.yaml", serveConfig(gw.URL, listen))

	hup := make(chan os.Signal, 1)
	addr, logs := startServeHUP(t, cfgPath, noEnv, hup)

	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` +
		media.URL + `/cat.png"}}]}]}`
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat with an image: %d\n%s", resp.StatusCode, logs)
	}
	if media.conns() == 0 {
		t.Fatal("no kept-alive connection to the media host: the test proves nothing")
	}

	// Rejected: the new build (its own fetch-media node) is closed; the
	// live workflow keeps its connection.
	writeFile(t, dir, "wf.yaml", mediaWorkflow+"    bogus: 1\n")
	hup <- syscall.SIGHUP
	waitMetric(t, addr, reloadsFail, 1, logs)
	if media.conns() == 0 {
		t.Fatal("a rejected reload closed the live workflow's connections")
	}

	// Accepted: the old generation has no request running, so it closes now.
	writeFile(t, dir, "wf.yaml", decodeOnly("two", "2"))
	hup <- syscall.SIGHUP
	waitMetric(t, addr, reloadsOK, 1, logs)
	media.waitClosed(t, "the replaced generation")
}

// The replaced generation waits for the requests running on it: while one
// is still in flight (its decode leg held by the gateway), the old
// workflow's fetch-media connection stays; when it ends, it goes.
func TestServeReloadDrainsBeforeClose(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"gw":"slow"}`))
	}))
	t.Cleanup(gw.Close)
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	media := newMediaHost(t)
	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", mediaWorkflow)
	cfgPath := writeFile(t, dir, "serve.yaml", serveConfig(gw.URL, listen))

	hup := make(chan os.Signal, 1)
	addr, logs := startServeHUP(t, cfgPath, noEnv, hup)

	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` +
		media.URL + `/cat.png"}}]}]}`
	done := make(chan int, 1)
	go func() {
		resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case <-entered: // media fetched, decode leg waiting at the gateway
	case <-time.After(5 * time.Second):
		t.Fatalf("the request never reached the gateway:\n%s", logs)
	}
	if media.conns() == 0 {
		t.Fatal("no kept-alive connection to the media host: the test proves nothing")
	}

	writeFile(t, dir, "wf.yaml", decodeOnly("two", "2"))
	hup <- syscall.SIGHUP
	waitMetric(t, addr, reloadsOK, 1, logs)
	time.Sleep(200 * time.Millisecond) // room for a premature close to show
	if media.conns() == 0 {
		t.Fatal("the old generation was closed under a request still running on it")
	}
	open()
	if code := <-done; code != 200 {
		t.Fatalf("the request in flight across the reload: %d", code)
	}
	media.waitClosed(t, "the drained generation")
}

// The per-request cost of counting a generation's requests (Serve's enter
// and leave around the workflow), all cores on one generation.
func BenchmarkGenerationCount(b *testing.B) {
	g := &generation{idle: make(chan struct{}, 1)}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.running.Add(1)
			g.leave()
		}
	})
}
