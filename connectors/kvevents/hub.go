package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/connectors/upstream"
)

// Worker is one worker whose events are read: the pool it serves in, its
// base URL (as the pool's endpoint names it), and in the connect topology
// its bound publisher (kv_events); Replay is its ROUTER replay endpoint
// (kv_replay), "" for none.
type Worker struct {
	Pool   string
	ID     string // how metrics and /health name it (pool[index]: never an address); Base when empty
	Base   string
	Events string
	Replay string
}

// Options are a Hub's shared settings (upstream.kv_events).
type Options struct {
	// Bind, when set, is the one SUB endpoint the workers' publishers
	// connect to (bind topology); every Worker.Events is then empty.
	Bind string
	// Topic is the subscription prefix ("" for every topic, as vLLM's
	// default topic is "").
	Topic              string
	StaleAfter         time.Duration // DefaultStaleAfter when 0
	MaxBlocksPerWorker int           // DefaultMaxBlocksPerWorker when 0
	BlockSize          int           // assumed before a worker's first BlockStored (upstream.prefix_block_tokens)
	Log                *logrus.Logger
	// ReplayTimeout bounds one replay request (default 2s); BackoffMin and
	// BackoffMax bound the reconnect delay (default 250ms and 10s).
	ReplayTimeout          time.Duration
	BackoffMin, BackoffMax time.Duration
	// StateEvery is how often worker states are checked for the state-change
	// log (default 1s).
	StateEvery time.Duration
}

// Hub subscribes to the KV events of a set of workers and keeps their
// Index. New opens nothing; Start opens the sockets; Close closes them and
// waits for every goroutine.
type Hub struct {
	opts    Options
	workers []Worker
	index   *Index
	byBase  map[string]*workerIndex
	pools   map[string][]string // pool → bases
	log     *logrus.Logger

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
	startMu sync.Mutex
	started bool
	bindTo  string // the bound address once started (bind topology)

	stateMu sync.Mutex
	states  map[string]string // last logged state per base
}

// New checks ws and o and builds the hub without opening a socket.
func New(ws []Worker, o Options) (*Hub, error) {
	if o.Log == nil {
		o.Log = logrus.StandardLogger()
	}
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = 2 * time.Second
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 250 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(10*time.Second, o.BackoffMin)
	}
	if o.StateEvery <= 0 {
		o.StateEvery = time.Second
	}
	if len(ws) == 0 {
		return nil, errors.New("kv events: no worker to subscribe to")
	}
	var errs []error
	if o.Bind != "" {
		if err := CheckEndpoint(o.Bind); err != nil {
			errs = append(errs, fmt.Errorf("bind: %w", err))
		}
	}
	seen := map[string]Worker{}
	var bases []string
	pools := map[string][]string{}
	for _, w := range ws {
		w.Base = upstream.BaseOf(w.Base)
		if w.ID == "" {
			w.ID = w.Base
		}
		switch {
		case o.Bind == "" && w.Events == "":
			errs = append(errs, fmt.Errorf("%s: no kv_events endpoint and no upstream.kv_events.bind", w.Base))
		case o.Bind != "" && w.Events != "":
			errs = append(errs, fmt.Errorf("%s: kv_events (connect) and upstream.kv_events.bind (bind) are exclusive", w.Base))
		case w.Events != "":
			if err := CheckEndpoint(w.Events); err != nil {
				errs = append(errs, fmt.Errorf("%s: kv_events: %w", w.Base, err))
			}
		}
		if w.Replay != "" {
			if err := CheckEndpoint(w.Replay); err != nil {
				errs = append(errs, fmt.Errorf("%s: kv_replay: %w", w.Base, err))
			}
		}
		pools[w.Pool] = append(pools[w.Pool], w.Base)
		if prev, ok := seen[w.Base]; ok {
			if prev.Events != w.Events || prev.Replay != w.Replay {
				errs = append(errs, fmt.Errorf("%s: in two pools with different kv_events or kv_replay", w.Base))
			}
			continue
		}
		seen[w.Base] = w
		bases = append(bases, w.Base)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var uniq []Worker
	for _, b := range bases {
		uniq = append(uniq, seen[b])
	}
	x := NewIndex(bases, o.Bind == "", o.StaleAfter, o.MaxBlocksPerWorker, o.BlockSize)
	h := &Hub{opts: o, workers: uniq, index: x, byBase: x.workers, pools: pools, log: o.Log, states: map[string]string{}}
	if o.Bind == "" {
		for _, w := range h.byBase {
			w.connected = false // until its SUB connects
		}
	}
	return h, nil
}

// CheckEndpoint accepts a ZeroMQ TCP endpoint: tcp://host:port (a bind may
// use * or an empty host for every interface).
func CheckEndpoint(ep string) error {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return fmt.Errorf("%q: want tcp://host:port", ep)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return fmt.Errorf("%q: %v", ep, err)
	}
	if port == "" || strings.Trim(port, "0123456789") != "" || len(port) > 5 {
		return fmt.Errorf("%q: bad port %q", ep, port)
	}
	_ = host
	return nil
}

// Index is the hub's index (tests, metrics).
func (h *Hub) Index() *Index { return h.index }

// Source is the CacheSource of one pool: the index, answering only for
// that pool's workers.
func (h *Hub) Source(pool string) upstream.CacheSource {
	if _, ok := h.pools[pool]; !ok {
		return nil
	}
	return h.index
}

// Pools lists the pools that have subscribed workers, sorted.
func (h *Hub) Pools() []string {
	var out []string
	for p := range h.pools {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// BindAddr is the address the bind topology's SUB listens on once started
// (a port 0 in the config is resolved); "" otherwise.
func (h *Hub) BindAddr() string { return h.bindTo }

// Start opens the sockets: one SUB per worker dialling its publisher
// (connect topology, each reconnecting with backoff), or the one bound SUB
// (bind topology: an address that cannot be bound is an error).
// Starting a started hub does nothing (a generation that lends its hub to
// the next starts it once).
func (h *Hub) Start() error {
	h.startMu.Lock()
	defer h.startMu.Unlock()
	if h.started {
		return nil
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	if h.opts.Bind != "" {
		sub := zmq4.NewSub(h.ctx, zmq4.WithLogger(quietLog))
		if err := sub.SetOption(zmq4.OptionSubscribe, h.opts.Topic); err != nil {
			sub.Close()
			return err
		}
		ep := strings.Replace(h.opts.Bind, "://*:", "://:", 1)
		if err := sub.Listen(ep); err != nil {
			sub.Close()
			h.cancel()
			return fmt.Errorf("kv events: %w", err)
		}
		if a := sub.Addr(); a != nil {
			h.bindTo = "tcp://" + a.String()
		}
		h.started = true
		h.wg.Add(1)
		go h.runBound(sub)
	} else {
		h.started = true
		for _, w := range h.workers {
			h.wg.Add(1)
			go h.runConnect(w)
		}
	}
	h.wg.Add(1)
	go h.watchStates()
	return nil
}

// Close stops every subscriber and waits for them. Safe to call on a hub
// that was never started, and more than once.
func (h *Hub) Close() {
	h.once.Do(func() {
		h.startMu.Lock()
		h.started = true // a closed hub is never started
		cancel := h.cancel
		h.startMu.Unlock()
		if cancel != nil {
			cancel()
		}
		h.wg.Wait()
	})
}

// quietLog swallows zmq4's own log lines: the hub logs what matters, rate
// limited (a worker that cannot be reached must not write a line per try).
var quietLog = log.New(io.Discard, "", 0)

// runConnect keeps a SUB connected to one worker's publisher: a failed dial
// or a lost connection is retried with exponential backoff (jitter-free,
// capped), logged once when it starts failing and then at most once a
// minute, and counted.
func (h *Hub) runConnect(w Worker) {
	defer h.wg.Done()
	wi := h.byBase[w.Base]
	backoff := h.opts.BackoffMin
	var failing time.Time // first failure of the current run of failures
	var lastLog time.Time
	tries := 0
	for h.ctx.Err() == nil {
		sub := zmq4.NewSub(h.ctx, zmq4.WithLogger(quietLog), zmq4.WithDialerMaxRetries(0),
			zmq4.WithDialerTimeout(5*time.Second))
		_ = sub.SetOption(zmq4.OptionSubscribe, h.opts.Topic)
		err := sub.Dial(w.Events)
		if err != nil {
			sub.Close()
			wi.connectFailures.Add(1)
			tries++
			now := time.Now()
			if failing.IsZero() {
				failing = now
			}
			if lastLog.IsZero() || now.Sub(lastLog) >= time.Minute {
				h.log.WithFields(logrus.Fields{"worker": w.Base, "kv_events": w.Events, "attempts": tries,
					"failing_since": failing.Format(time.RFC3339)}).WithError(err).
					Warn("kv events: cannot reach the worker's publisher; retrying with backoff (its requests are routed by the prediction index)")
				lastLog = now
			}
			if !sleepCtx(h.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, h.opts.BackoffMax)
			continue
		}
		if !failing.IsZero() {
			h.log.WithFields(logrus.Fields{"worker": w.Base, "kv_events": w.Events, "attempts": tries}).
				Info("kv events: connected to the worker's publisher after failures")
		}
		failing, lastLog, tries, backoff = time.Time{}, time.Time{}, 0, h.opts.BackoffMin
		// A new connection may be a new process: the view starts over
		// (what the worker holds now is learned from replay or new events).
		wi.mu.Lock()
		wi.clear()
		wi.connected, wi.synced, wi.gapped = true, false, false
		wi.mu.Unlock()
		// Within one connection the sequence never goes back for a
		// restart (that is a new connection): a batch already seen is a
		// replayed one arriving live too.
		st := &seqState{dups: true}
		if w.Replay != "" {
			h.resync(wi, w.Replay, st)
		}
		for {
			msg, err := sub.Recv()
			if err != nil {
				break // connection lost, or closing
			}
			m, perr := ParseMessage(msg.Frames)
			if perr != nil {
				wi.decodeErrors.Add(1)
				continue
			}
			h.receive(wi, w.Replay, st, m)
		}
		sub.Close()
		wi.mu.Lock()
		wi.connected = false
		wi.downSince = time.Now()
		wi.mu.Unlock()
		if h.ctx.Err() != nil {
			return
		}
		wi.restarts.Add(1)
		if !sleepCtx(h.ctx, backoff) {
			return
		}
	}
}

// runBound reads the one bound SUB: each message's topic names its worker.
func (h *Hub) runBound(sub zmq4.Socket) {
	defer h.wg.Done()
	defer sub.Close()
	st := map[*workerIndex]*seqState{}
	unknown := map[string]time.Time{}
	for {
		msg, err := sub.Recv()
		if err != nil {
			if h.ctx.Err() != nil {
				return
			}
			continue // one publisher's connection ended; the others go on
		}
		m, perr := ParseMessage(msg.Frames)
		if perr != nil {
			continue
		}
		wi := h.workerOfTopic(m.Topic)
		if wi == nil {
			if t, ok := unknown[m.Topic]; !ok || time.Since(t) >= time.Minute {
				unknown[m.Topic] = time.Now()
				h.log.WithField("topic", m.Topic).Warn("kv events: a publisher's topic names no configured worker (want kv@<host:port or host>@<model>, the host:port of an endpoint URL); its events are ignored")
			}
			continue
		}
		s := st[wi]
		if s == nil {
			s = &seqState{}
			st[wi] = s
		}
		replay := ""
		for _, w := range h.workers {
			if w.Base == wi.base {
				replay = w.Replay
			}
		}
		h.receive(wi, replay, s, m)
	}
}

// workerOfTopic finds the worker a topic names: llm-d's kv@<pod>@<model>,
// <pod> being an endpoint URL's host:port, or its host when only one
// subscribed endpoint has that host; a topic that is a base URL itself
// names that endpoint.
func (h *Hub) workerOfTopic(topic string) *workerIndex {
	if w := h.byBase[upstream.BaseOf(topic)]; w != nil {
		return w
	}
	pod := topic
	if parts := strings.Split(topic, "@"); len(parts) == 3 {
		pod = parts[1]
	}
	var byHost *workerIndex
	n := 0
	for base, w := range h.byBase {
		u, err := url.Parse(base)
		if err != nil {
			continue
		}
		if u.Host == pod {
			return w
		}
		if u.Hostname() == pod {
			byHost = w
			n++
		}
	}
	if n == 1 {
		return byHost
	}
	return nil
}

// seqState is one publisher's sequence as seen by one subscriber.
type seqState struct {
	have bool
	next int64 // the seq expected next
	dups bool  // a seq below next is a duplicate (connect topology), not a restart
}

// resync fills a view that starts empty (a new connection) with what the
// publisher still buffers, so that a worker is usable at once rather than
// after its next batch (an idle worker sends none). A publisher that has
// buffered nothing holds nothing: the empty view is complete.
func (h *Hub) resync(wi *workerIndex, replay string, st *seqState) {
	ok, next := h.replay(wi, replay, 0, -1, false)
	if !ok {
		return
	}
	st.have, st.next = next > 0, next
	wi.mu.Lock()
	wi.synced = true
	wi.lastBatch = time.Now()
	wi.mu.Unlock()
}

// receive checks m's seq against what came before and applies it: the
// first batch of a view (and a batch after a restart) starts it, asking the
// replay endpoint for what the publisher still buffers from seq 0; a gap is
// filled from the replay endpoint or marks the worker gapped.
func (h *Hub) receive(wi *workerIndex, replay string, st *seqState, m Message) {
	switch {
	case st.have && m.Seq < st.next && st.dups:
		return // applied already (from replay)
	case !st.have || m.Seq < st.next:
		if st.have {
			// The sequence went back: the publisher restarted, and its
			// cache with it (vLLM's seq counts from 0 per process).
			wi.restarts.Add(1)
			wi.mu.Lock()
			wi.clear()
			wi.synced, wi.gapped = false, false
			wi.mu.Unlock()
		}
		if m.Seq > 0 && replay != "" {
			// Whatever the publisher still buffers is history this view
			// lacks; a partial history only costs misses (the view
			// started empty).
			_, _ = h.replay(wi, replay, 0, m.Seq, false)
		}
	case m.Seq > st.next:
		wi.gaps.Add(1)
		if ok, _ := h.replay(wi, replay, st.next, m.Seq, true); replay == "" || !ok {
			wi.mu.Lock()
			if !wi.gapped {
				h.log.WithFields(logrus.Fields{"worker": wi.base, "missed_from": st.next, "missed_to": m.Seq - 1}).
					Warn("kv events: batches lost and not replayable; the worker is routed by the prediction index until it clears its cache or restarts")
			}
			wi.gapped = true
			wi.clear()
			wi.mu.Unlock()
		}
	}
	st.have, st.next = true, m.Seq+1
	b, err := Decode(m.Payload)
	if err != nil {
		wi.decodeErrors.Add(1)
		wi.mu.Lock()
		if !wi.gapped {
			h.log.WithField("worker", wi.base).WithError(err).Warn("kv events: a batch could not be decoded; the worker is treated as gapped")
		}
		wi.gapped = true
		wi.clear()
		wi.mu.Unlock()
		return
	}
	wi.mu.Lock()
	wi.apply(b, time.Now())
	wi.mu.Unlock()
}

// replay asks the publisher's ROUTER for batches from seq from, applies
// those before upTo in order (every one when upTo is -1), and reports
// whether [from, upTo) was covered without a hole, and the seq after the
// last one applied. With strict false (a view starting empty) a history
// that begins after from is applied too.
func (h *Hub) replay(wi *workerIndex, ep string, from, upTo int64, strict bool) (bool, int64) {
	if ep == "" {
		return false, from
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithLogger(quietLog), zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(h.opts.ReplayTimeout))
	defer d.Close()
	fail := func(err error) (bool, int64) {
		wi.replayFailures.Add(1)
		h.log.WithFields(logrus.Fields{"worker": wi.base, "kv_replay": ep, "from": from}).WithError(err).Warn("kv events: replay failed")
		return false, from
	}
	if err := d.Dial(ep); err != nil {
		return fail(err)
	}
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], uint64(from))
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, seq[:])); err != nil {
		return fail(err)
	}
	var got []*Batch
	want := from
	for {
		msg, err := d.Recv()
		if err != nil {
			return fail(err)
		}
		fr := msg.Frames
		if len(fr) > 0 && len(fr[0]) == 0 {
			fr = fr[1:] // the ROUTER's empty delimiter
		}
		if len(fr) != 2 || len(fr[0]) != 8 {
			return fail(fmt.Errorf("replay reply of %d frames", len(fr)))
		}
		s := int64(binary.BigEndian.Uint64(fr[0]))
		if s == -1 {
			break // end of the buffered batches
		}
		if upTo >= 0 && s >= upTo {
			continue // the live stream brings these
		}
		if s < want {
			continue
		}
		if s > want && (strict || len(got) > 0) {
			return fail(fmt.Errorf("replay skips from seq %d to %d (the publisher no longer buffers them)", want, s))
		}
		b, err := Decode(fr[1])
		if err != nil {
			wi.decodeErrors.Add(1)
			return fail(err)
		}
		got = append(got, b)
		want = s + 1
	}
	if upTo >= 0 && want != upTo && (strict || len(got) > 0) {
		return fail(fmt.Errorf("replay ended at seq %d, before %d", want, upTo))
	}
	wi.mu.Lock()
	now := time.Now()
	for _, b := range got {
		wi.apply(b, now)
	}
	wi.mu.Unlock()
	wi.replayed.Add(int64(len(got)))
	return true, want
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
