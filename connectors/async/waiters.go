package async

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiters is one replica's registry of long-poll waiters (GET ?wait=N and
// wait mode): ONE Redis pub/sub connection per replica, whatever the number
// of waiters, whose messages wake the waiters of the key each message
// names. A waiter costs a map entry and a channel, not a connection: 2,000
// waiters used to cost 2,000 subscriptions on the llm-d back end.
//
// Pub/sub is a hint (a message published while the connection is being
// re-established is lost), so callers re-read the state after a wake-up and
// keep a polling fallback; and when the subscription comes back after a
// drop, every waiter is woken once so that none sleeps through a result
// that landed meanwhile.
//
// Both back ends use it: the builtin one subscribes to its events channel
// ("done <tenant>:<id>"), the llm-d one to the keyspace notifications of
// the mailboxes (a pattern). The subscription starts with the first Watch
// (or Start) and is retried, with a capped backoff, for as long as Redis
// refuses it.
type Waiters struct {
	rdb redis.UniversalClient
	cfg WaitersConfig

	mu      sync.Mutex
	started bool
	closed  bool
	ready   chan struct{} // closed once the first subscription is confirmed
	gaveUp  atomic.Bool   // a wait for ready ran out: do not wait again
	cancel  context.CancelFunc
	ps      *redis.PubSub // set by loop; Close closes it to end a blocked Receive
	done    chan struct{} // closed when the receive loop has ended
	keys    map[string]map[chan struct{}]struct{}
	n       int // watches registered
}

// WaitersConfig says what to subscribe to and how a message names a key.
type WaitersConfig struct {
	Channels []string // SUBSCRIBE these
	Patterns []string // PSUBSCRIBE these (Key sees the matching channel)
	// Key maps a message to the waiter key it wakes; "" wakes nobody.
	Key func(channel, payload string) string
	// OnMessage, when set, sees every message before Key (the builtin back
	// end's cancel hook). It must not block.
	OnMessage func(channel, payload string)
	// ReadyTimeout bounds how long the first Watch waits for the
	// subscription's confirmation, so that a result published right after
	// Watch returns is not missed [2s]. Redis down: Watch returns after it
	// and the caller's polling fallback answers.
	ReadyTimeout time.Duration
}

// NewWaiters builds a registry; nothing is subscribed before the first
// Watch or Start.
func NewWaiters(rdb redis.UniversalClient, cfg WaitersConfig) *Waiters {
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Second
	}
	if cfg.Key == nil {
		cfg.Key = func(_, payload string) string { return payload }
	}
	return &Waiters{rdb: rdb, cfg: cfg, keys: map[string]map[chan struct{}]struct{}{},
		ready: make(chan struct{}), done: make(chan struct{})}
}

// Start subscribes (idempotent) and waits up to ReadyTimeout for the
// confirmation.
func (w *Waiters) Start() {
	w.mu.Lock()
	if w.started || w.closed {
		w.mu.Unlock()
		w.waitReady()
		return
	}
	w.started = true
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.mu.Unlock()
	go w.loop(ctx)
	w.waitReady()
}

// waitReady waits for the first confirmation, up to ReadyTimeout, once:
// after one wait ran out (Redis away, SUBSCRIBE refused) later watches do
// not wait again, the callers' polling answers until it comes.
func (w *Waiters) waitReady() {
	if w.gaveUp.Load() {
		return
	}
	t := time.NewTimer(w.cfg.ReadyTimeout)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-t.C:
		w.gaveUp.Store(true)
	}
}

// Watch registers a waiter for key: the channel is closed at the next
// message naming key (or when the subscription is re-established, or on
// Close). stop releases the watch; call it whether or not the channel was
// closed.
func (w *Waiters) Watch(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		close(ch)
		return ch, func() {}
	}
	set := w.keys[key]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		w.keys[key] = set
	}
	set[ch] = struct{}{}
	w.n++
	started := w.started
	w.mu.Unlock()
	if started {
		w.waitReady() // returns at once after the first confirmation
	} else {
		w.Start()
	}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if s := w.keys[key]; s != nil {
				if _, ok := s[ch]; ok {
					delete(s, ch)
					w.n--
					if len(s) == 0 {
						delete(w.keys, key)
					}
				}
			}
		})
	}
}

// Wake closes every waiter of key (a local event: no Redis round trip).
func (w *Waiters) Wake(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeLocked(key)
}

func (w *Waiters) wakeLocked(key string) {
	for ch := range w.keys[key] {
		close(ch)
		w.n--
	}
	delete(w.keys, key)
}

// wakeAll closes every waiter (the subscription was re-established: any
// message may have been lost meanwhile).
func (w *Waiters) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.keys {
		w.wakeLocked(k)
	}
}

// Len is the number of registered watches (metrics, tests).
func (w *Waiters) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// Close ends the subscription and wakes every waiter.
func (w *Waiters) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	started := w.started
	if w.cancel != nil {
		w.cancel()
	}
	if w.ps != nil {
		_ = w.ps.Close() // a blocked Receive does not watch its context
	}
	w.mu.Unlock()
	if started {
		<-w.done
	}
	w.wakeAll()
}

// loop keeps one subscription alive until ctx ends. go-redis re-dials and
// re-subscribes a dropped PubSub on the next Receive; the confirmations it
// then delivers tell us the subscription is back.
func (w *Waiters) loop(ctx context.Context) {
	defer close(w.done)
	ps := w.rdb.Subscribe(ctx)
	defer ps.Close()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.ps = ps
	w.mu.Unlock()
	for {
		var err error
		if len(w.cfg.Channels) > 0 {
			err = ps.Subscribe(ctx, w.cfg.Channels...)
		}
		if err == nil && len(w.cfg.Patterns) > 0 {
			err = ps.PSubscribe(ctx, w.cfg.Patterns...)
		}
		if err == nil {
			break
		}
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
	want := len(w.cfg.Channels) + len(w.cfg.Patterns)
	confirmed, everReady := 0, false
	var bo Backoff
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// The connection dropped (or Redis refused): the next Receive
			// re-dials and re-subscribes. Back off so a dead Redis is not
			// dialled in a loop.
			confirmed = 0
			if errors.Is(err, redis.ErrClosed) || !sleepCtx(ctx, bo.Next()) {
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "psubscribe" {
				continue
			}
			confirmed++
			if confirmed < want {
				continue
			}
			bo.Reset()
			if !everReady {
				everReady = true
				close(w.ready)
				continue
			}
			w.wakeAll()
		case *redis.Message:
			if f := w.cfg.OnMessage; f != nil {
				f(m.Channel, m.Payload)
			}
			if k := w.cfg.Key(m.Channel, m.Payload); k != "" {
				w.Wake(k)
			}
		}
	}
}

// sleepCtx sleeps d or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Backoff is a bounded, jittered exponential backoff: Next returns Min,
// then doubles up to Max, each value scaled by a random factor in
// [0.5, 1.0) so replicas retrying the same Redis do not step in lock-step.
// The zero value is 50 ms to 5 s. Not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next is the next pause.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 50 * time.Millisecond
	}
	if hi <= 0 {
		hi = 5 * time.Second
	}
	if b.cur < lo {
		b.cur = lo
	} else {
		b.cur = min(2*b.cur, hi)
	}
	return b.cur/2 + rand.N(b.cur/2+1)
}

// Reset starts again from Min (after a success).
func (b *Backoff) Reset() { b.cur = 0 }
