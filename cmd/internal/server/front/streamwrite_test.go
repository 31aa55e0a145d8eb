package front

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/tlsfiles"
)

// endlessUpstream is a worker whose streamed reply never ends on its own:
// 32 KiB events as fast as the connection takes them (bounded: 8192
// events, 256 MiB). gone is closed once its request's context or
// connection ended, which is how a cancelled leg looks from the worker.
type endlessUpstream struct {
	srv     *httptest.Server
	started chan struct{}
	gone    chan struct{}
	once    sync.Once
	sonce   sync.Once
}

func newEndlessUpstream(t *testing.T) *endlessUpstream {
	u := &endlessUpstream{started: make(chan struct{}), gone: make(chan struct{})}
	event := []byte("data: " + strings.Repeat("x", 32<<10) + "\n\n")
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer u.once.Do(func() { close(u.gone) })
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		u.sonce.Do(func() { close(u.started) })
		for range 8192 {
			if _, err := w.Write(event); err != nil {
				return
			}
			if rc.Flush() != nil || r.Context().Err() != nil {
				return
			}
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// runner relays the upstream's stream to the client as a relaying node
// does (nodes/internal/leg.Relay: the real upstream.RelayWith, the leg on
// the run's context, a failure classified by the run's context first);
// non-streaming requests get a small JSON answer.
func (u *endlessUpstream) runner() *fakeRunner {
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	return &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		if !run.Req.Stream {
			return answerJSON(run, `{"ok":true}`)
		}
		req, _ := http.NewRequestWithContext(run.Ctx, http.MethodPost, u.srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			return &engine.Report{Workflow: "fake", Err: engine.AsError(err)}
		}
		w, _ := run.Answer()
		_, err = upstream.RelayWith(w, resp, upstream.RelayOptions{ReqID: run.Req.ID, Stream: true})
		rep := &engine.Report{Workflow: "fake", Answered: true}
		switch {
		case err == nil:
		case run.Ctx.Err() != nil:
			rep.Err = engine.AsError(run.Ctx.Err())
		default:
			rep.Err = engine.Errorf(engine.KindBadGateway, "reply broke off")
		}
		return rep
	}}
}

// observations collects the front's Observe reports.
type observations struct {
	mu  sync.Mutex
	obs []Observation
}

func (o *observations) observe(ob *Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.obs = append(o.obs, *ob)
}

func (o *observations) streams() []Observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Observation
	for _, ob := range o.obs {
		if ob.Stream {
			out = append(out, ob)
		}
	}
	return out
}

const streamBody = `{"model":"m","stream":true,"messages":[]}`

// stallH1 opens a raw TCP connection with a small receive buffer, sends a
// streaming request and never reads: the server's writes block once the
// kernel buffers are full.
func stallH1(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(streamBody)) + "\r\n\r\n" + streamBody
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn
}

// stallH2 speaks HTTP/2 over TLS with raw frames: its SETTINGS give every
// stream a zero flow-control window and it never sends WINDOW_UPDATE, so
// the server cannot send one byte of the reply's body. It reads frames
// (acknowledging SETTINGS) and reports stream 1's RST_STREAM code on rst.
func stallH2(t *testing.T, addr string, st *tlsSetup) (rst <-chan http2.ErrCode) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: st.ca.Pool(), NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN negotiated %q, want h2", p)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", addr},
		{":path", "/v1/chat/completions"}, {"content-type", "application/json"},
		{"content-length", strconv.Itoa(len(streamBody))}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, []byte(streamBody)); err != nil {
		t.Fatal(err)
	}
	out := make(chan http2.ErrCode, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck() // the only writer once set up
				}
			case *http2.RSTStreamFrame:
				if f.StreamID == 1 {
					out <- f.ErrCode
					return
				}
			}
		}
	}()
	return out
}

// Issue 17 item 2: a client that stops reading a stream no longer holds it
// (and its admission slot) forever. With admission at 1 in flight, a
// stalled HTTP/1.1 reader (raw TCP, tiny receive buffer) and a stalled
// HTTP/2 reader (zero flow-control window, no WINDOW_UPDATE) each have
// their stream ended at server.stream_write_timeout: the worker's leg is
// cancelled, the slot is released (the next request is admitted, not
// 429), and the outcome is the client's failure: client_closed_request,
// a partial reply, logged "stream ended, the client stopped reading".
func TestStreamWriteDeadlineStalledReader(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		t.Run(proto, func(t *testing.T) {
			u := newEndlessUpstream(t)
			obs := &observations{}
			var st *tlsSetup
			tweak := func(o *Options) {
				o.Admission = Admission{Limits: admission.Limits{MaxInFlight: 1}}
				o.StreamWriteTimeout = 300 * time.Millisecond
				o.Observe = obs.observe
				if st != nil {
					o.TLS = st.files.Config()
				}
			}
			var client *http.Client
			var rst <-chan http2.ErrCode
			var h *harness
			if proto == "HTTP/2" {
				st = newTLSSetup(t, tlsfiles.ServerConfig{})
				h = start(t, u.runner(), tweak)
				h.url = "https://" + h.addr
				client = st.client(true)
				rst = stallH2(t, h.addr, st)
			} else {
				h = start(t, u.runner(), tweak)
				client = testClient
				stallH1(t, h.addr)
			}
			select {
			case <-u.started:
			case <-time.After(10 * time.Second):
				t.Fatal("the stalled client's stream never reached the worker")
			}
			// The deadline is 300ms; "must happen" gets a generous bound.
			select {
			case <-u.gone:
			case <-time.After(15 * time.Second):
				t.Fatal("the worker's leg was never cancelled: the stalled stream still holds it")
			}
			if rst != nil {
				select {
				case code := <-rst:
					t.Logf("stream 1 reset with %v", code)
				case <-time.After(15 * time.Second):
					t.Fatal("the stalled HTTP/2 stream was never reset")
				}
			}
			// The slot comes back once the handler has returned: wait for
			// the request's observation, then the next one is admitted.
			waitFor(t, "the stalled stream's end", func() bool { return len(obs.streams()) == 1 })
			ob := obs.streams()[0]
			if !ob.Partial || ob.Status != http.StatusOK {
				t.Errorf("observation: partial %v status %d, want a partial 200", ob.Partial, ob.Status)
			}
			req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("next request: %d %s, want 200 (the stalled stream's slot released)", resp.StatusCode, b)
			}
			lines := findLog(t, h.logs, "the client stopped reading")
			if len(lines) != 1 || lines[0]["code"] != "client_closed_request" || lines[0]["partial"] != true ||
				!strings.Contains(lines[0]["error"].(string), "stream_write_timeout (300ms)") {
				t.Fatalf("summary line of the stalled stream: %v\n%s", lines, h.logs.String())
			}
		})
	}
}

// BenchmarkStreamChunks measures a stream of 256 SSE events, each written
// and flushed on its own, through the real server over loopback HTTP/1.1:
// what the per-write deadline (set before a chunk, cleared after its
// flush) costs per event.
func BenchmarkStreamChunks(b *testing.B) {
	event := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n")
	r := &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		w, _ := run.Answer()
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for range 256 {
			if _, err := w.Write(event); err != nil {
				break
			}
			if rc.Flush() != nil {
				break
			}
		}
		return &engine.Report{Workflow: "bench", Answered: true}
	}}
	opts, _ := newOpts(&testing.T{}, r, logrus.WarnLevel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	opts.Listener = ln
	s := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	b.ReportAllocs()
	for b.Loop() {
		r.mu.Lock()
		r.runs = r.runs[:0]
		r.mu.Unlock()
		resp, err := client.Post(url, "application/json", strings.NewReader(streamBody))
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != int64(256*len(event)) {
			b.Fatalf("read %d bytes", n)
		}
	}
}

// server.stream_write_timeout is part of the live set: 0 is the default
// (a stream is never exempt), a reload's value applies to requests that
// arrive afterwards.
func TestStreamWriteTimeoutLive(t *testing.T) {
	s := New(Options{})
	if got := s.Live().StreamWriteTimeout; got != DefaultStreamWriteTimeout {
		t.Fatalf("default %s, want %s", got, DefaultStreamWriteTimeout)
	}
	l := s.Live()
	l.StreamWriteTimeout = 7 * time.Second
	s.SetLive(l)
	if got := s.Live().StreamWriteTimeout; got != 7*time.Second {
		t.Fatalf("after SetLive %s", got)
	}
	var seen time.Duration
	runner := &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		seen = run.Slot.(*exchange).streamWT
		return answerJSON(run, `{}`)
	}}
	s.SetRunners(map[engine.Route]engine.Runner{engine.RouteChat: runner})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`)))
	if rec.Code != 200 || seen != 7*time.Second {
		t.Fatalf("status %d, the request saw %s", rec.Code, seen)
	}
}
