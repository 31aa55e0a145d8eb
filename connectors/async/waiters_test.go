package async

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/connectors/async/redistest"
)

// clients counts the server's client connections (INFO clients).
func clients(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	s, err := rdb.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "connected_clients:"); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatal("no connected_clients in INFO")
	return 0
}

// Many waiters share one subscription: wake-ups fan out by key, and the
// server sees one pub/sub connection whatever the number of waiters.
func TestWaitersShareOneSubscription(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		cfg  WaitersConfig
		pub  func(key string) (channel, payload string)
	}{
		{"channel", WaitersConfig{Channels: []string{"ev"}}, func(k string) (string, string) { return "ev", k }},
		{"pattern", WaitersConfig{Patterns: []string{"box:*"}, Key: func(ch, _ string) string { return strings.TrimPrefix(ch, "box:") }},
			func(k string) (string, string) { return "box:" + k, "x" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := NewWaiters(rdb, c.cfg)
			defer w.Close()
			before := clients(t, rdb)
			const n = 500
			chs := make([]<-chan struct{}, n)
			stops := make([]func(), n)
			for i := range chs {
				chs[i], stops[i] = w.Watch(fmt.Sprintf("k%d", i%50))
			}
			if got := w.Len(); got != n {
				t.Fatalf("Len %d, want %d", got, n)
			}
			if d := clients(t, rdb) - before; d > 1 {
				t.Fatalf("%d waiters opened %d connections, want at most 1", n, d)
			}
			ch, payload := c.pub("k7")
			if err := rdb.Publish(ctx, ch, payload).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range chs {
				if i%50 != 7 {
					continue
				}
				select {
				case <-chs[i]:
				case <-time.After(10 * time.Second):
					t.Fatalf("waiter %d not woken", i)
				}
			}
			for i := range chs {
				if i%50 == 7 {
					continue
				}
				select {
				case <-chs[i]:
					t.Fatalf("waiter %d of another key woken", i)
				default:
				}
			}
			for _, s := range stops {
				s()
				s() // idempotent
			}
			if got := w.Len(); got != 0 {
				t.Fatalf("Len after stop %d, want 0", got)
			}
		})
	}
}

// A subscription dropped by the server comes back, and every waiter is
// woken once so that none sleeps through a message lost meanwhile.
func TestWaitersResubscribeWakesAll(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	w := NewWaiters(rdb, WaitersConfig{Channels: []string{"ev"}})
	defer w.Close()
	ch, stop := w.Watch("a")
	defer stop()
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken after the subscription came back")
	}
	// And the new subscription delivers.
	ch2, stop2 := w.Watch("b")
	defer stop2()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_ = rdb.Publish(ctx, "ev", "b").Err()
		select {
		case <-ch2:
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery after resubscribe")
		}
	}
}

func TestBackoffBounded(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	for i := 0; i < 20; i++ {
		d := b.Next()
		if d < 5*time.Millisecond || d > 80*time.Millisecond {
			t.Fatalf("step %d: %v outside [5ms, 80ms]", i, d)
		}
	}
	b.Reset()
	if d := b.Next(); d > 10*time.Millisecond {
		t.Fatalf("after Reset: %v, want at most Min", d)
	}
}

// With Redis away, only the first watch waits for the subscription (up to
// ReadyTimeout); later ones return at once and the callers poll.
func TestWaitersRedisAwayWaitsOnce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	srv.Stop()
	w := NewWaiters(rdb, WaitersConfig{Channels: []string{"ev"}, ReadyTimeout: 200 * time.Millisecond})
	defer w.Close()
	_, stop := w.Watch("a")
	stop()
	start := time.Now()
	for i := 0; i < 20; i++ {
		_, stop := w.Watch("a")
		stop()
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("20 watches with Redis away took %v: each waited for the subscription", d)
	}
}
