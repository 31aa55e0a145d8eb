package async

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// 2,000 long-poll waiters on the llm-d back end share one keyspace
// subscription: the replica holds O(1) Redis connections (CLIENT LIST), not
// one per waiter as before, and every waiter wakes on its own result.
func TestLLMDWaitersShareOneSubscription(t *testing.T) {
	const n = 2000
	ctx := context.Background()
	l, rdb := newLLMD(t, LLMDConfig{})
	defer l.Close()
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "Kl").Err(); err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	defer admin.Close()
	conns := func() int {
		list := admin.ClientList(ctx).Val()
		return strings.Count(strings.TrimSpace(list), "\n") // the lines but admin's own
	}
	base := conns()

	chans := make([]<-chan struct{}, n)
	stops := make([]func(), n)
	for i := range n {
		id := "w" + strconv.Itoa(i)
		if _, err := l.Submit(ctx, job(id, `{"i":`+strconv.Itoa(i)+`}`)); err != nil {
			t.Fatal(err)
		}
		chans[i], stops[i] = l.Watch("t1", id)
	}
	if got := conns() - base; got > 2 {
		t.Fatalf("%d waiters hold %d more Redis connections, want at most 2", n, got)
	}
	if l.waiters.Len() != n {
		t.Fatalf("registered %d", l.waiters.Len())
	}
	for i := range n {
		select {
		case <-chans[i]:
			t.Fatalf("waiter %d woke before any result", i)
		default:
		}
	}
	// The processor answers every request; each waiter wakes.
	(&apProc{t: t, rdb: rdb, queue: "default", now: time.Now}).run(ctx)
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for i := range n {
		select {
		case <-chans[i]:
		case <-deadline.C:
			t.Fatalf("waiter %d did not wake on its result", i)
		}
		stops[i]()
	}
	if l.waiters.Len() != 0 {
		t.Fatalf("%d watches left", l.waiters.Len())
	}
}

// A mailbox event wakes only the waiters of its own (tenant, id).
func TestMailboxMember(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"t1:x:0123456789abcdef0123456789abcdef", "t1:x"},
		{"t1:x", "t1:x"}, // before generations
		{"t1:xy:00", "t1:xy"},
		{"t1:", ""},
		{"t1", ""},
		{":x", ""},
	} {
		if got := mailboxMember(c.in); got != c.want {
			t.Errorf("mailboxMember(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A DELETE wakes this replica's waiters of the request at once (a DEL is
// no list event), so a long-poll answers 410 without waiting for its poll.
func TestLLMDDeleteWakesWaiters(t *testing.T) {
	ctx := context.Background()
	l, _ := newLLMD(t, LLMDConfig{})
	defer l.Close()
	if _, err := l.Submit(ctx, job("dw", `{}`)); err != nil {
		t.Fatal(err)
	}
	ch, stop := l.Watch("t1", "dw")
	defer stop()
	if err := l.Cancel(ctx, "t1", "dw", false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("the waiter was not woken by the DELETE")
	}
}
