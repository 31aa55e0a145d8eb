package sim

import (
	"container/list"
	"sync"
	"time"
)

// leaseStore is a bounded map whose entries expire after a lease, like the
// KV blocks a vLLM NIXL prefill pins until the decode side reads them or the
// lease runs out. The oldest entry goes first when the bound is hit.
type leaseStore[V any] struct {
	mu    sync.Mutex
	lease time.Duration
	cap   int
	ll    *list.List // of *leaseEntry[V], oldest at the back
	m     map[string]*list.Element
}

type leaseEntry[V any] struct {
	id      string
	v       V
	expires time.Time
}

func newLeaseStore[V any](lease time.Duration, capacity int) *leaseStore[V] {
	return &leaseStore[V]{lease: lease, cap: max(capacity, 1), ll: list.New(), m: map[string]*list.Element{}}
}

func (s *leaseStore[V]) put(id string, v V) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[id]; ok {
		s.ll.Remove(e)
	}
	s.m[id] = s.ll.PushFront(&leaseEntry[V]{id: id, v: v, expires: time.Now().Add(s.lease)})
	for s.ll.Len() > s.cap {
		s.removeLocked(s.ll.Back())
	}
}

func (s *leaseStore[V]) get(id string) (V, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero V
	e, ok := s.m[id]
	if !ok {
		return zero, false
	}
	le := e.Value.(*leaseEntry[V])
	if time.Now().After(le.expires) {
		s.removeLocked(e)
		return zero, false
	}
	return le.v, true
}

func (s *leaseStore[V]) removeLocked(e *list.Element) {
	s.ll.Remove(e)
	delete(s.m, e.Value.(*leaseEntry[V]).id)
}
