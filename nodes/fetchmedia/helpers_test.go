package fetchmedia

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// pngBytes is a real PNG, so sniffing recognises it.
func pngBytes(t testing.TB, side int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, side, side))
	for i := range side {
		img.Set(i, i, color.RGBA{R: 200, A: 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// hosts is a LookupFunc over a fixed table; other names do not resolve.
func hosts(m map[string]string) LookupFunc {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		a, ok := m[strings.ToLower(host)]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
}

// mediaServer is a 127.0.0.1 server counting requests and recording the
// headers of the last one.
type mediaServer struct {
	*httptest.Server
	count    atomic.Int32
	lastHdr  atomic.Value // http.Header
	lastHost atomic.Value // string
}

func newMediaServer(t *testing.T, h http.HandlerFunc) *mediaServer {
	s := &mediaServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.count.Add(1)
		s.lastHdr.Store(r.Header.Clone())
		s.lastHost.Store(r.Host)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// port is the server's port, to build URLs with other host names.
func (s *mediaServer) port() string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

func mustNode(t testing.TB, params string, lookup LookupFunc) *Node {
	t.Helper()
	n, err := New(json.RawMessage(params), lookup)
	if err != nil {
		t.Fatalf("build %s: %v", params, err)
	}
	return n
}

// run executes the node on a chat body and returns the result and state.
func run(t testing.TB, n *Node, body string) (engine.Result, *engine.State) {
	return runCtx(context.Background(), n, body)
}

func runCtx(ctx context.Context, n *Node, body string) (engine.Result, *engine.State) {
	return runBytes(ctx, n, []byte(body))
}

func runBytes(ctx context.Context, n *Node, body []byte) (engine.Result, *engine.State) {
	req := &engine.Request{ID: "req-1", Route: engine.RouteChat, Body: body,
		Header: http.Header{"Authorization": {"Bearer secret"}, "X-Request-Id": {"req-1"}, "Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}
	r := engine.NewRun(ctx, req, httptest.NewRecorder())
	res := n.Run(ctx, &engine.Exec{Run: r, NodeID: "fetch", Index: -1, Attempt: 1})
	return res, &r.State
}

// chat builds a chat body with one user message holding the given parts.
func chat(parts ...string) string {
	return `{"model":"m","seed":12345678901234567890,"messages":[{"role":"user","content":[{"type":"text","text":"what?"},` +
		strings.Join(parts, ",") + `]}],"max_tokens":5}`
}

func imagePart(url string) string { return `{"type":"image_url","image_url":{"url":"` + url + `"}}` }

func wantErr(t *testing.T, res engine.Result, kind engine.Kind, contains ...string) *engine.Error {
	t.Helper()
	if res.Err == nil {
		t.Fatalf("succeeded, want %v error", kind)
	}
	e := engine.AsError(res.Err)
	if e.Kind != kind {
		t.Fatalf("kind %v (%s), want %v", e.Kind, e.Error(), kind)
	}
	for _, c := range contains {
		if !strings.Contains(e.Msg, c) {
			t.Errorf("message %q lacks %q", e.Msg, c)
		}
	}
	return e
}

// checkParts verifies that each item's offsets slice its part object out of
// the body, and returns the url of each part.
func checkParts(t *testing.T, st *engine.State) []string {
	t.Helper()
	if !json.Valid(st.Body) {
		t.Fatalf("body is not JSON: %.200s", st.Body)
	}
	var urls []string
	for _, it := range st.Media {
		o, err := jsonb.ObjectAt(st.Body, it.PartStart)
		if err != nil || o.End != it.PartEnd {
			t.Fatalf("item %d offsets %d..%d do not delimit an object (%v)", it.Index, it.PartStart, it.PartEnd, err)
		}
		var part map[string]json.RawMessage
		if err := json.Unmarshal(st.Body[it.PartStart:it.PartEnd], &part); err != nil {
			t.Fatal(err)
		}
		var typ string
		_ = json.Unmarshal(part["type"], &typ)
		var inner map[string]any
		_ = json.Unmarshal(part[typ], &inner)
		s, _ := inner["url"].(string)
		if d, ok := inner["data"].(string); ok {
			s = d
		}
		urls = append(urls, s)
	}
	return urls
}
