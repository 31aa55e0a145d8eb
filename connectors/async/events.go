package async

import (
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// events is one replica's subscription to the back end's event channel:
// "done <tenant>:<id>" wakes local waiters, "cancel <tenant>:<id>" reaches
// the local dispatcher. It is a Waiters (one connection per replica, shared
// by every waiter) with the cancel hook on top. Pub/sub is a hint (a message
// published while the subscription reconnects is lost): waiters poll as a
// fallback and are all woken when the subscription comes back, and the
// dispatcher also learns of cancels when it renews a claim.
type events struct {
	*Waiters

	mu       sync.Mutex
	onCancel func(string)
}

func newEvents(rdb redis.UniversalClient, name string) *events {
	e := &events{}
	e.Waiters = NewWaiters(rdb, WaitersConfig{
		Channels: []string{name},
		Key: func(_, payload string) string {
			kind, member, ok := strings.Cut(payload, " ")
			if !ok || (kind != "done" && kind != "cancel") {
				return ""
			}
			return member
		},
		OnMessage: func(_, payload string) {
			kind, member, ok := strings.Cut(payload, " ")
			if !ok || kind != "cancel" {
				return
			}
			e.mu.Lock()
			f := e.onCancel
			e.mu.Unlock()
			if f != nil {
				f(member)
			}
		},
	})
	return e
}

func (e *events) watch(member string) (<-chan struct{}, func()) { return e.Watch(member) }

func (e *events) setCancelHook(f func(string)) {
	e.mu.Lock()
	e.onCancel = f
	e.mu.Unlock()
	e.Start()
}

func (e *events) close() { e.Close() }
