package engine

import (
	"testing"
	"time"
)

// The CEL error log: one line per (node, expr) and interval, the next one
// counting the events the interval suppressed.
func TestCELErrorLogLimit(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &celErrLog{now: func() time.Time { return now }}
	k, other := celErrKey{"gate", "guard"}, celErrKey{"gate", "edge:gate->decode"}
	steps := []struct {
		advance    time.Duration
		key        celErrKey
		ok         bool
		suppressed int
	}{
		{0, k, true, 0},
		{time.Second, k, false, 0},
		{time.Second, k, false, 0},
		{0, other, true, 0}, // another expression has its own budget
		{CELErrorLogInterval, k, true, 2},
		{time.Second, k, false, 0},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		ok, n := l.admit(s.key)
		if ok != s.ok || n != s.suppressed {
			t.Fatalf("step %d: admit = %v, %d; want %v, %d", i, ok, n, s.ok, s.suppressed)
		}
	}
}
