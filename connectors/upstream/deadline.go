package upstream

import (
	"context"
	"io"
	"sync/atomic"
	"time"
)

// watchedBody bounds reading a reply's body (Leg.Idle, Leg.BodyTimeout):
// a worker that sends its headers and then stalls or trickles would
// otherwise hold the leg until the client gives up (issue 10). One timer
// serves both bounds and re-arms itself for what is left, so a Read costs
// one atomic store. Expiry cancels the leg's context, which unblocks the
// pending Read (the transport closes the connection); that Read then
// reports a *TimeoutError instead of the cancellation.
type watchedBody struct {
	io.ReadCloser                 // the legBody: Close also cancels the leg
	parent        context.Context // the caller's: its end wins over a bound
	cancel        context.CancelFunc
	idle, total   time.Duration
	start         time.Time
	last          atomic.Int64 // time of the last byte, since start
	phase         atomic.Pointer[string]
	released      atomic.Bool // ReleaseBodyBounds: the rest is relayed, unbounded
	timer         *time.Timer
}

// ReleaseBodyBounds lifts a reply body's Leg.Idle and Leg.BodyTimeout: for
// a leg whose reply celflow reads the start of and then relays (worker-mode
// conditional decode: the verdict is read, a hit is relayed, and a relayed
// stream has no total bound). A bound that already expired stays expired.
// A body without bounds is left alone.
func ReleaseBodyBounds(body io.ReadCloser) {
	if w, ok := body.(*watchedBody); ok {
		w.released.Store(true)
		w.timer.Stop()
	}
}

func watchBody(parent context.Context, body io.ReadCloser, cancel context.CancelFunc, idle, total time.Duration) *watchedBody {
	w := &watchedBody{ReadCloser: body, parent: parent, cancel: cancel, idle: idle, total: total, start: time.Now()}
	w.timer = time.AfterFunc(w.next(0), w.check)
	return w
}

// next is the wait until the nearer bound, given the time since start.
func (w *watchedBody) next(now time.Duration) time.Duration {
	d := time.Duration(1<<63 - 1)
	if w.idle > 0 {
		d = w.idle - (now - time.Duration(w.last.Load()))
	}
	if w.total > 0 {
		d = min(d, w.total-now)
	}
	return d
}

func (w *watchedBody) check() {
	if w.released.Load() {
		return
	}
	now := time.Since(w.start)
	switch {
	case w.total > 0 && now >= w.total:
		p := PhaseBody
		w.phase.Store(&p)
	case w.idle > 0 && now-time.Duration(w.last.Load()) >= w.idle:
		p := PhaseIdle
		w.phase.Store(&p)
	default:
		w.timer.Reset(w.next(now))
		return
	}
	w.cancel()
}

func (w *watchedBody) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if n > 0 && w.idle > 0 {
		w.last.Store(int64(time.Since(w.start)))
	}
	if err != nil && err != io.EOF {
		if perr := w.parent.Err(); perr != nil {
			return n, perr // the client left or the request deadline passed
		}
		if ph := w.phase.Load(); ph != nil {
			after := w.idle
			if *ph == PhaseBody {
				after = w.total
			}
			return n, &TimeoutError{After: after, Phase: *ph}
		}
	}
	return n, err
}

func (w *watchedBody) Close() error {
	w.timer.Stop()
	return w.ReadCloser.Close()
}
