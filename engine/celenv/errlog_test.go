package celenv

import (
	"testing"
	"time"
)

// The CEL error log: one line per (node, expr) and interval, the next one
// counting the events the interval suppressed.
func TestErrorLogLimit(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &ErrorLog{now: func() time.Time { return now }}
	k, other := [2]string{"gate", "guard"}, [2]string{"gate", "edge:gate->decode"}
	steps := []struct {
		advance    time.Duration
		key        [2]string
		ok         bool
		suppressed int
	}{
		{0, k, true, 0},
		{time.Second, k, false, 0},
		{time.Second, k, false, 0},
		{0, other, true, 0}, // another expression has its own budget
		{ErrorLogInterval, k, true, 2},
		{time.Second, k, false, 0},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		ok, n := l.Admit(s.key[0], s.key[1])
		if ok != s.ok || n != s.suppressed {
			t.Fatalf("step %d: admit = %v, %d; want %v, %d", i, ok, n, s.ok, s.suppressed)
		}
	}
}
