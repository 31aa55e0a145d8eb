package fetchmedia

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
)

// connCounter is an httptest server that counts its open connections on
// the server side, so a test sees what a client really keeps open.
type connCounter struct {
	*httptest.Server
	mu   sync.Mutex
	open map[net.Conn]bool
}

func newConnCounter(t *testing.T, h http.HandlerFunc) *connCounter {
	c := &connCounter{open: map[net.Conn]bool{}}
	c.Server = httptest.NewUnstartedServer(h)
	c.Config.ConnState = func(conn net.Conn, st http.ConnState) {
		c.mu.Lock()
		defer c.mu.Unlock()
		switch st {
		case http.StateNew:
			c.open[conn] = true
		case http.StateClosed, http.StateHijacked:
			delete(c.open, conn)
		}
	}
	c.Start()
	t.Cleanup(c.Close)
	return c
}

func (c *connCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

// waitConns polls until the server counts want open connections (bounded).
func (c *connCounter) waitConns(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.count() != want {
		if time.Now().After(deadline) {
			t.Fatalf("server sees %d open connections, want %d", c.count(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close drops the idle connections the node's transport keeps to media
// hosts, is idempotent, and leaves the node usable (a request that still
// runs on a retired workflow works, on a new connection).
func TestCloseDropsIdleConnections(t *testing.T) {
	img := pngBytes(t, 8)
	srv := newConnCounter(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(img)
	})
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	var c engine.Closer = n // the engine finds it through this interface
	body := chat(imagePart(srv.URL+"/a.png"), imagePart(srv.URL+"/b.png"))
	if res, _ := run(t, n, body); res.Err != nil {
		t.Fatal(res.Err)
	}
	if srv.count() == 0 {
		t.Fatal("no connection kept alive after the download: the test proves nothing")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	srv.waitConns(t, 0)
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if res, _ := run(t, n, body); res.Err != nil {
		t.Fatalf("a run after Close: %v", res.Err)
	}
}
