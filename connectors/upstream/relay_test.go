package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// front is a minimal celflow: it sends one decode leg to upstream and
// relays the answer; the relay's error is reported on errc.
func front(t *testing.T, c *Client, upstream string, o RelayOptions, errc chan<- error) *httptest.Server {
	t.Helper()
	return httptest.NewServer(frontHandler(c, upstream, o, errc))
}

func frontHandler(c *Client, upstream string, o RelayOptions, errc chan<- error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body as celflow does: only then does Go's server watch
		// the connection and cancel r.Context() when the client leaves.
		io.Copy(io.Discard, r.Body)
		resp, err := c.Send(r.Context(), upstream, &Leg{Role: RoleDecode, Path: "/v1/chat/completions", Header: r.Header, ReqID: "canon-1", Relay: true})
		if err != nil {
			errc <- err
			http.Error(w, "send", 502)
			return
		}
		_, err = RelayWith(w, resp, o)
		errc <- err
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	})
}

// ACCEPTANCE 176, 181: each SSE event reaches the client before the next is
// sent, bytes identical, headers relayed with the canonical id.
func TestRelayFlushesEachEvent(t *testing.T) {
	events := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}]}\n\n",
	}
	next := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Request-Id", "upstream-echo")
		w.Header().Set("X-Upstream", "v")
		w.WriteHeader(200)
		for i, ev := range events {
			if i > 0 {
				select { // the client must have read the previous event
				case <-next:
				case <-r.Context().Done():
					return
				}
			}
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	errc := make(chan error, 1)
	c := gatewayClient(t, up.URL)
	fr := front(t, c, up.URL, RelayOptions{ReqID: "canon-1"}, errc)
	defer fr.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a coalescing relay hangs: fail instead
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", fr.URL, strings.NewReader(`{"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != "canon-1" {
		t.Errorf("X-Request-Id = %q", got)
	}
	if resp.Header.Get("X-Upstream") != "v" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("headers not relayed: %v", resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	var got strings.Builder
	for i, ev := range events {
		b := make([]byte, len(ev))
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		got.Write(b)
		if i < len(events)-1 {
			next <- struct{}{}
		}
	}
	rest, err := io.ReadAll(br)
	if err != nil || len(rest) != 0 {
		t.Errorf("after the events: %q %v (nothing may be added)", rest, err)
	}
	if got.String() != strings.Join(events, "") {
		t.Errorf("bytes differ: %q", got.String())
	}
	if err := <-errc; err != nil {
		t.Errorf("relay: %v", err)
	}
}

// ACCEPTANCE 179 (relay side): a short body is an error after the status,
// and the client sees a truncation.
func TestRelayTruncation(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
			return
		}
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"choices\":")
	}()
	base := "http://" + l.Addr().String()
	errc := make(chan error, 1)
	c := gatewayClient(t, base)
	fr := front(t, c, base, RelayOptions{ReqID: "canon-1"}, errc)
	defer fr.Close()
	resp, err := http.Post(fr.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || rerr == nil {
		t.Errorf("client: status %d, body %q, read error %v (want a truncation)", resp.StatusCode, b, rerr)
	}
	if err := <-errc; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("relay err = %v, want unexpected EOF", err)
	}
}

func TestRelayIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	c := gatewayClient(t, up.URL)
	resp, err := c.Send(context.Background(), up.URL, &Leg{Role: RoleDecode, Path: "/x", Relay: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	n, err := Relay(rec, resp, "canon-1", 100*time.Millisecond)
	if !errors.Is(err, ErrIdleTimeout) || n != int64(len("data: 1\n\n")) {
		t.Fatalf("n=%d err=%v, want the first event then ErrIdleTimeout", n, err)
	}
	if rec.Body.String() != "data: 1\n\n" || rec.Header().Get("X-Request-Id") != "canon-1" {
		t.Errorf("recorded %q %v", rec.Body.String(), rec.Header())
	}
}

// Gaps shorter than the idle bound never end a stream that outlasts it.
func TestRelayIdleNotTotal(t *testing.T) {
	const chunks = 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range chunks {
			io.WriteString(w, "data: x\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond) // 20 gaps: the stream lasts longer than the bound
		}
	}))
	defer up.Close()
	c := gatewayClient(t, up.URL)
	resp, err := c.Send(context.Background(), up.URL, &Leg{Role: RoleDecode, Path: "/x", Relay: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	n, err := Relay(rec, resp, "canon-1", 300*time.Millisecond)
	if err != nil || n != chunks*int64(len("data: x\n\n")) {
		t.Fatalf("n=%d err=%v", n, err)
	}
}

// ACCEPTANCE 177, 178 (scaled down): a server write timeout neither cuts a
// stream that outlasts it nor a non-streaming reply that arrives after it.
func TestRelayWriteTimeout(t *testing.T) {
	const serverWT = 200 * time.Millisecond
	tests := []struct {
		name string
		up   http.HandlerFunc
		want string
	}{
		{"stream outlasting the write timeout", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 4 {
				io.WriteString(w, "data: "+string(rune('0'+i))+"\n\n")
				w.(http.Flusher).Flush()
				time.Sleep(serverWT / 2) // time must pass: the stream lasts 2× the timeout
			}
		}, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\n"},
		{"non-streaming reply after the write timeout", func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(serverWT * 2) // the decode "thinks" past the server's write deadline
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[]}`)
		}, `{"choices":[]}`},
	}
	for _, tt := range tests {
		// The relay's own write_timeout (PROTOCOL 14) set to the server's,
		// shorter than both the stream and the decode's wait: it counts
		// from the first write of a non-streaming reply, and streams are
		// exempt, so neither is cut.
		for _, wt := range []time.Duration{0, serverWT, 5 * time.Second} {
			t.Run(tt.name+"/relay write timeout "+wt.String(), func(t *testing.T) {
				up := httptest.NewServer(tt.up)
				defer up.Close()
				c := gatewayClient(t, up.URL)
				errc := make(chan error, 1)
				fr := httptest.NewUnstartedServer(frontHandler(c, up.URL, RelayOptions{ReqID: "canon-1", WriteTimeout: wt}, errc))
				fr.Config.WriteTimeout = serverWT
				fr.Start()
				defer fr.Close()
				resp, err := http.Post(fr.URL, "application/json", strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != tt.want {
					t.Fatalf("client got %q, %v", b, err)
				}
				if err := <-errc; err != nil {
					t.Errorf("relay: %v", err)
				}
			})
		}
	}
}
