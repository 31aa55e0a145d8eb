package celenv

import (
	"sync"
	"time"
)

// ErrorLogInterval bounds the log of run-time CEL errors: one line per
// (node, expression) and interval, the next one counting the events the
// interval suppressed (docs/workflow-reference.md, Run-time errors).
const ErrorLogInterval = 10 * time.Second

// ErrorLog rate-limits the log of run-time CEL errors of one loaded
// config (a generation's state, not the process's: a reload starts
// afresh). The zero value is ready; it is safe for concurrent use.
type ErrorLog struct {
	mu   sync.Mutex
	last map[errLogKey]*errLogEntry
	now  func() time.Time // tests
}

type errLogKey struct{ node, expr string }

type errLogEntry struct {
	at         time.Time
	suppressed int
}

// Admit says whether to log an event of (node, expr) now and, if so, how
// many events of it the interval before suppressed. A nil ErrorLog logs
// every event.
func (l *ErrorLog) Admit(node, expr string) (bool, int) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	if l.last == nil {
		l.last = map[errLogKey]*errLogEntry{}
	}
	k := errLogKey{node, expr}
	e := l.last[k]
	if e == nil {
		l.last[k] = &errLogEntry{at: now}
		return true, 0
	}
	if now.Sub(e.at) < ErrorLogInterval {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.at, e.suppressed = now, 0
	return true, n
}
