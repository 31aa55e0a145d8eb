package front

import (
	"sync"
	"sync/atomic"
	"time"
)

// writeWatch is the stream write deadline over HTTP/2 (exchange.arm). There
// an armed write deadline resets the stream when it expires, written to or
// not, so it cannot stay set between chunks; setting and clearing it around
// every chunk costs two messages to the connection's serve goroutine per
// event. Instead the exchange stamps when a write starts and clears the
// stamp when its flush returns (two atomic stores per event), and one timer
// per stream checks the stamp, re-arming itself for what is left: a write
// pending for the whole timeout makes it expire the stream, which sets a
// deadline in the past through http.ResponseController (the stream is reset
// at once and the blocked write fails).
type writeWatch struct {
	d      time.Duration
	origin time.Time    // monotonic origin of since
	since  atomic.Int64 // 1 + the pending write's start since origin; 0: none
	fired  atomic.Bool

	mu      sync.Mutex // stop and the timer's check: never expire after stop
	stopped bool
	timer   *time.Timer
	expire  func()
}

func newWriteWatch(d time.Duration, expire func()) *writeWatch {
	w := &writeWatch{d: d, origin: time.Now(), expire: expire}
	w.timer = time.AfterFunc(d, w.check)
	return w
}

// begin marks a write in progress (a no-op while one is).
func (w *writeWatch) begin() {
	if w.since.Load() == 0 {
		w.since.Store(int64(time.Since(w.origin)) + 1)
	}
}

// end marks the chunk flushed.
func (w *writeWatch) end() { w.since.Store(0) }

func (w *writeWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	s := w.since.Load()
	if s == 0 {
		w.timer.Reset(w.d)
		return
	}
	pending := time.Since(w.origin) - time.Duration(s-1)
	if pending < w.d {
		w.timer.Reset(w.d - pending)
		return
	}
	w.fired.Store(true)
	w.expire()
}

// stop ends the watch before the handler returns: expire never runs after
// it (it touches the handler's ResponseWriter).
func (w *writeWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	w.mu.Unlock()
}
