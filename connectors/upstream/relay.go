package upstream

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrIdleTimeout: a relayed body was silent longer than the idle bound
// (stream_idle_timeout, docs/protocol.md, Timeouts).
var ErrIdleTimeout = errors.New("upstream body idle timeout")

// relayBufSize bounds one read: an SSE event is far smaller, and a read
// returns what has arrived, so the size never delays a chunk.
const relayBufSize = 16 << 10

var relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}

// relay: see Relay and RelayWith.
//
// Deadlines: a streaming reply (text/event-stream, or o.Stream) gets no
// write deadline; a non-streaming one gets now+WriteTimeout (none when 0),
// so write_timeout counts from here, not from the request's arrival
// (docs/protocol.md, Timeouts): a stream or a slow non-streaming reply
// longer than write_timeout completes.
func relay(w http.ResponseWriter, resp *http.Response, o RelayOptions) (n int64, err error) {
	body := resp.Body
	defer body.Close()

	h := w.Header()
	copyReplyHeaders(h, resp.Header)
	if o.ReqID != "" {
		h["X-Request-Id"] = []string{o.ReqID}
	}
	rc := http.NewResponseController(w)
	stream := o.Stream || IsEventStream(resp.Header.Get("Content-Type"))
	// Deadline errors are ErrNotSupported on writers without a connection.
	var deadline time.Time
	if !stream && o.WriteTimeout > 0 {
		deadline = time.Now().Add(o.WriteTimeout)
	}
	_ = rc.SetWriteDeadline(deadline)
	w.WriteHeader(resp.StatusCode)
	if stream {
		_ = rc.Flush() // the client sees the status before the first event
	}

	idle := newIdleWatch(o.Idle, body)
	defer idle.stop()
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		nr, rerr := body.Read(buf)
		if nr > 0 {
			idle.busy()
			nw, werr := w.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			// One flush per read that returned data: SSE events are never
			// coalesced.
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return n, ferr
			}
			idle.heard()
		}
		switch {
		case rerr == io.EOF:
			return n, nil
		case rerr != nil && idle.fired():
			return n, ErrIdleTimeout
		case rerr != nil:
			return n, rerr
		}
	}
}

// IsEventStream reports a text/event-stream media type, parameters allowed,
// without mime.ParseMediaType's allocations.
func IsEventStream(ct string) bool {
	const sse = "text/event-stream"
	ct = strings.TrimLeft(ct, " \t")
	if len(ct) < len(sse) || !strings.EqualFold(ct[:len(sse)], sse) {
		return false
	}
	rest := strings.TrimLeft(ct[len(sse):], " \t")
	return rest == "" || rest[0] == ';'
}

// idleWatch bounds the upstream's silence between two chunks. Instead of a
// timer Stop/Reset per chunk it stamps the time of the last chunk; the timer
// re-arms itself for what is left, so a chunk costs two atomic stores.
// Expiry closes the body, which unblocks the pending Read (the transport
// closes the connection) and so cancels the leg.
type idleWatch struct {
	d     time.Duration
	start time.Time    // monotonic origin of last
	last  atomic.Int64 // since start; writing while writing to the client
	hit   atomic.Bool  // expired
	timer *time.Timer
	body  io.Closer
}

// writing marks time spent writing to a (slow) client: not upstream silence.
const writing = int64(-1)

// newIdleWatch returns nil for d ≤ 0 (no bound); the methods accept nil.
func newIdleWatch(d time.Duration, body io.Closer) *idleWatch {
	if d <= 0 {
		return nil
	}
	w := &idleWatch{d: d, start: time.Now(), body: body}
	w.timer = time.AfterFunc(d, w.check)
	return w
}

func (w *idleWatch) check() {
	l := w.last.Load()
	if l == writing {
		w.timer.Reset(w.d)
		return
	}
	quiet := time.Since(w.start) - time.Duration(l)
	if quiet < w.d {
		w.timer.Reset(w.d - quiet)
		return
	}
	w.hit.Store(true)
	w.body.Close()
}

func (w *idleWatch) busy() {
	if w != nil {
		w.last.Store(writing)
	}
}

func (w *idleWatch) heard() {
	if w != nil {
		w.last.Store(int64(time.Since(w.start)))
	}
}

func (w *idleWatch) fired() bool { return w != nil && w.hit.Load() }

func (w *idleWatch) stop() {
	if w != nil {
		w.timer.Stop()
	}
}
