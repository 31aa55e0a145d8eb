package upstream

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func gatewayClient(t testing.TB, base string) *Client {
	t.Helper()
	c, err := New(Config{Gateway: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdle)
	return c
}

// recorder is an upstream that records what each leg carried.
type recorder struct {
	mu     sync.Mutex
	header http.Header
	body   string
	path   string
	length int64
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.header, r.body, r.path, r.length = req.Header.Clone(), string(b), req.URL.Path, req.ContentLength
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"ok":true}`)
}

// ACCEPTANCE 14, 15: what each kind of leg stamps and forwards.
func TestSendHeaders(t *testing.T) {
	client := http.Header{
		"X-Custom":        {"a", "b"},
		"Authorization":   {"Bearer t"},
		"Cookie":          {"c=1"},
		"Connection":      {"X-Hop"},
		"X-Hop":           {"h"},
		"Epp-Profile":     {"prefill"},
		"Prefer":          {"if-available"},
		"Content-Type":    {"text/plain"},
		"X-Request-Id":    {"client"},
		"Traceparent":     {"00-client-01"},
		"Tracestate":      {"c=1"},
		"Accept-Encoding": {"br"},
	}
	span := http.Header{"traceparent": {"00-span-01"}}
	tests := []struct {
		name string
		leg  Leg
		want map[string][]string // nil value: header must be absent
	}{
		{"render", Leg{Path: "/v1/chat/completions/render"}, map[string][]string{
			"Epp-Profile": nil, "Prefer": nil, "Traceparent": {"00-client-01"}, "Tracestate": {"c=1"},
			"Accept-Encoding": {"gzip"}, // Go's own negotiation, not the client's br
		}},
		{"prefill with a span", Leg{Role: RolePrefill, Path: "/v1/completions", Trace: span}, map[string][]string{
			"Epp-Profile": {"prefill"}, "Prefer": nil, "Traceparent": {"00-span-01"}, "Tracestate": nil,
		}},
		{"conditional decode", Leg{Role: RoleDecode, Path: "/v1/chat/completions", Prefer: true, Relay: true}, map[string][]string{
			"Epp-Profile": {"decode"}, "Prefer": {"if-available"}, "Accept-Encoding": {"br"},
		}},
		{"decode", Leg{Role: RoleDecode, Path: "/v1/chat/completions", Relay: true}, map[string][]string{
			"Epp-Profile": {"decode"}, "Prefer": nil,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			c := gatewayClient(t, srv.URL)
			body := `{"model":"m"}`
			leg := tt.leg
			leg.Body, leg.Length, leg.Header, leg.ReqID = strings.NewReader(body), int64(len(body)), client, "req-1"
			resp, err := c.Send(context.Background(), c.impl.gateway, &leg)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			h := rec.header
			common := map[string][]string{
				"Content-Type":  {"application/json"},
				"X-Request-Id":  {"req-1"},
				"X-Custom":      {"a", "b"},
				"Authorization": {"Bearer t"},
				"Cookie":        {"c=1"},
				"X-Hop":         nil,
			}
			for _, want := range []map[string][]string{common, tt.want} {
				for k, v := range want {
					if got := h[k]; !reflect.DeepEqual(got, v) && !(v == nil && len(got) == 0) {
						t.Errorf("%s = %q, want %q", k, got, v)
					}
				}
			}
			if rec.body != body || rec.length != int64(len(body)) || rec.path != leg.Path {
				t.Errorf("body %q length %d path %q", rec.body, rec.length, rec.path)
			}
		})
	}
}

// ACCEPTANCE 16: legs never use HTTP(S)_PROXY.
func TestProxyEnvIgnored(t *testing.T) {
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	t.Setenv("HTTP_PROXY", deadURL)
	t.Setenv("HTTPS_PROXY", deadURL)
	t.Setenv("NO_PROXY", "")
	srv := httptest.NewServer(&recorder{})
	defer srv.Close()
	c := gatewayClient(t, srv.URL)
	if c.impl.rt.Proxy != nil {
		t.Fatal("transport has a Proxy func")
	}
	resp, err := c.Send(context.Background(), srv.URL, &Leg{Role: RolePrefill, Path: "/v1/completions"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func TestTTFBExpires(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := gatewayClient(t, srv.URL)
	var hooked error
	c.OnLeg = func(_ Role, status int, _ time.Duration, err error) { hooked = err }
	_, err := c.Send(context.Background(), srv.URL, &Leg{Role: RolePrefill, Path: "/x", TTFB: 50 * time.Millisecond})
	var te *TimeoutError
	if !errors.As(err, &te) || te.After != 50*time.Millisecond {
		t.Fatalf("err = %v, want *TimeoutError", err)
	}
	if hooked != err {
		t.Errorf("OnLeg saw %v", hooked)
	}
}

// The TTFB bounds the headers only: a stream that outlasts it flows.
func TestTTFBDoesNotBoundBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for i := range 3 {
			time.Sleep(60 * time.Millisecond) // let time pass beyond the TTFB
			io.WriteString(w, "data: "+string(rune('a'+i))+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	c := gatewayClient(t, srv.URL)
	resp, err := c.Send(context.Background(), srv.URL, &Leg{Role: RoleDecode, Path: "/x", TTFB: 50 * time.Millisecond, Relay: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "data: a\n\ndata: b\n\ndata: c\n\n" {
		t.Fatalf("body %q err %v", b, err)
	}
}

// ACCEPTANCE 182 (upstream side): cancelling the leg's context aborts it and
// the worker sees its request context end.
func TestSendCancelled(t *testing.T) {
	arrived, gone := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(gone)
	}))
	defer srv.Close()
	c := gatewayClient(t, srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	_, err := c.Send(ctx, srv.URL, &Leg{Role: RoleDecode, Path: "/x"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("upstream request was not cancelled")
	}
}

func TestSendTransportError(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	base := "http://" + l.Addr().String()
	l.Close()
	c := gatewayClient(t, base)
	_, err := c.Send(context.Background(), base, &Leg{Role: RolePrefill, Path: "/x"})
	var te *TransportError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want *TransportError", err)
	}
}

func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

// ACCEPTANCE 17: prefill's gzip reply is decoded; decode's reaches the
// client compressed.
func TestCompressionPerLeg(t *testing.T) {
	const payload = `{"kv_transfer_params":{"a":1}}`
	var seen sync.Map // path → Accept-Encoding
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ae := r.Header.Get("Accept-Encoding")
		seen.Store(r.URL.Path, ae)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(ae, "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gzipped(payload))
			return
		}
		io.WriteString(w, payload)
	}))
	defer srv.Close()
	c := gatewayClient(t, srv.URL)
	client := http.Header{"Accept-Encoding": {"gzip"}}

	resp, err := c.Send(context.Background(), srv.URL, &Leg{Role: RolePrefill, Path: "/prefill", Header: client})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadBody(resp, 1<<20)
	if err != nil || string(b) != payload {
		t.Fatalf("prefill body %q err %v", b, err)
	}

	resp, err = c.Send(context.Background(), srv.URL, &Leg{Role: RoleDecode, Path: "/decode", Header: client, Relay: true})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(raw, gzipped(payload)) {
		t.Fatalf("decode reply decoded or altered: CE %q body %q", resp.Header.Get("Content-Encoding"), raw)
	}

	resp, err = c.Send(context.Background(), srv.URL, &Leg{Role: RoleDecode, Path: "/plain", Relay: true})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ae, _ := seen.Load("/plain"); ae != "identity" {
		t.Errorf("relay leg without a client Accept-Encoding sent %q", ae)
	}
}

// staleServer answers the first request of each connection and, on the
// second request of a connection, reads it and closes without answering:
// the race of a worker closing an idle keep-alive connection.
type staleServer struct {
	l        net.Listener
	mu       sync.Mutex
	requests int
	conns    int
	// closeFirst: also close a fresh connection's first request unanswered.
	closeFirst bool
}

func newStaleServer(t *testing.T, closeFirst bool) *staleServer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &staleServer{l: l, closeFirst: closeFirst}
	go s.serve()
	t.Cleanup(func() { l.Close() })
	return s
}

func (s *staleServer) serve() {
	for {
		conn, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns++
		s.mu.Unlock()
		go s.handle(conn)
	}
}

func (s *staleServer) handle(conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for n := 0; n < 2; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		s.mu.Lock()
		s.requests++
		s.mu.Unlock()
		if n == 1 || s.closeFirst {
			return // close without a byte of response
		}
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	}
}

func (s *staleServer) counts() (requests, conns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.conns
}

func TestRetryOnStaleConnection(t *testing.T) {
	tests := []struct {
		name       string
		body       func() (io.Reader, func() io.Reader)
		closeFirst bool
		wantOK     bool
		wantReqs   int
	}{
		{"replayable body is resent once", func() (io.Reader, func() io.Reader) {
			return strings.NewReader(`{"a":1}`), nil
		}, false, true, 3},
		{"NewBody makes any body resendable", func() (io.Reader, func() io.Reader) {
			return io.MultiReader(strings.NewReader(`{"a":1}`)), func() io.Reader { return strings.NewReader(`{"a":1}`) }
		}, false, true, 3},
		{"a body that cannot be replayed is not resent", func() (io.Reader, func() io.Reader) {
			return io.MultiReader(strings.NewReader(`{"a":1}`)), nil
		}, false, false, 2},
		{"a fresh connection's failure is not resent", func() (io.Reader, func() io.Reader) {
			return strings.NewReader(`{"a":1}`), nil
		}, true, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStaleServer(t, tt.closeFirst)
			base := "http://" + s.l.Addr().String()
			c := gatewayClient(t, base)
			send := func() error {
				body, nb := tt.body()
				resp, err := c.Send(context.Background(), base, &Leg{Role: RolePrefill, Path: "/x", Body: body, Length: 7, NewBody: nb})
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				return err
			}
			if err := send(); (err == nil) != !tt.closeFirst {
				t.Fatalf("first send: %v", err)
			}
			if tt.closeFirst {
				if reqs, _ := s.counts(); reqs != tt.wantReqs {
					t.Errorf("server saw %d requests, want %d", reqs, tt.wantReqs)
				}
				return
			}
			err := send() // reuses the kept-alive connection, which the server drops
			if (err == nil) != tt.wantOK {
				t.Fatalf("second send: err = %v, want ok=%v", err, tt.wantOK)
			}
			var te *TransportError
			if err != nil && !errors.As(err, &te) {
				t.Errorf("err = %T %v, want *TransportError", err, err)
			}
			if reqs, _ := s.counts(); reqs != tt.wantReqs {
				t.Errorf("server saw %d requests, want %d", reqs, tt.wantReqs)
			}
		})
	}
}

func TestOnLegHook(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	c := gatewayClient(t, srv.URL)
	type call struct {
		role   Role
		status int
		err    error
	}
	var calls []call
	c.OnLeg = func(r Role, status int, d time.Duration, err error) {
		if d <= 0 {
			t.Errorf("duration %v", d)
		}
		calls = append(calls, call{r, status, err})
	}
	resp, err := c.Send(context.Background(), srv.URL, &Leg{Role: RoleEncode, Path: "/x"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(calls) != 1 || calls[0] != (call{RoleEncode, http.StatusTeapot, nil}) {
		t.Errorf("calls = %+v", calls)
	}
}
