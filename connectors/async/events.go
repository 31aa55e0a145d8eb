package async

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// events is one replica's subscription to the back end's event channel:
// "done <tenant>:<id>" wakes local waiters, "cancel <tenant>:<id>" reaches
// the local dispatcher. Pub/sub is a hint (a message published while the
// subscription reconnects is lost): waiters poll as a fallback, and the
// dispatcher also learns of cancels when it renews a claim.
type events struct {
	rdb  redis.UniversalClient
	name string

	mu       sync.Mutex
	started  bool
	ps       *redis.PubSub
	cancel   context.CancelFunc
	waiters  map[string]map[chan struct{}]struct{}
	onCancel func(string)
}

func newEvents(rdb redis.UniversalClient, name string) *events {
	return &events{rdb: rdb, name: name, waiters: map[string]map[chan struct{}]struct{}{}}
}

// start subscribes once; callers hold mu.
func (e *events) start() {
	if e.started {
		return
	}
	e.started = true
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.ps = e.rdb.Subscribe(ctx, e.name)
	// Wait for the subscription's confirmation (bounded), so that a watch
	// set up now sees a result published right after.
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	_, _ = e.ps.Receive(rctx)
	rcancel()
	ch := e.ps.Channel()
	go func() {
		for m := range ch {
			kind, member, ok := strings.Cut(m.Payload, " ")
			if !ok {
				continue
			}
			switch kind {
			case "done":
				e.wake(member)
			case "cancel":
				e.mu.Lock()
				f := e.onCancel
				e.mu.Unlock()
				if f != nil {
					f(member)
				}
				e.wake(member)
			}
		}
	}()
}

func (e *events) wake(member string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for ch := range e.waiters[member] {
		close(ch)
	}
	delete(e.waiters, member)
}

func (e *events) watch(member string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	e.mu.Lock()
	e.start()
	set := e.waiters[member]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		e.waiters[member] = set
	}
	set[ch] = struct{}{}
	e.mu.Unlock()
	return ch, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if s := e.waiters[member]; s != nil {
			if _, ok := s[ch]; ok {
				delete(s, ch)
				if len(s) == 0 {
					delete(e.waiters, member)
				}
			}
		}
	}
}

func (e *events) setCancelHook(f func(string)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.onCancel = f
	e.start()
}

func (e *events) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		_ = e.ps.Close()
		e.cancel()
	}
}
