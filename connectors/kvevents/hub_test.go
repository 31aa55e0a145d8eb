package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/celflow/celflow/connectors/upstream"
)

// testPub is a publisher on 127.0.0.1 that a test drives seq by seq: a PUB
// and a ROUTER answering replay requests from what it was told to keep.
type testPub struct {
	t      *testing.T
	pub    zmq4.Socket
	router zmq4.Socket
	ep, rp string
	mu     sync.Mutex
	kept   map[int64][]byte
	cancel context.CancelFunc
	done   chan struct{}
}

func newTestPub(t *testing.T, replay bool) *testPub {
	ctx, cancel := context.WithCancel(context.Background())
	p := &testPub{t: t, kept: map[int64][]byte{}, cancel: cancel, done: make(chan struct{})}
	p.pub = zmq4.NewPub(ctx, zmq4.WithLogger(quietLog))
	if err := p.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p.ep = "tcp://" + p.pub.Addr().String()
	if replay {
		p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(quietLog))
		if err := p.router.Listen("tcp://127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		p.rp = "tcp://" + p.router.Addr().String()
		go p.serve()
	} else {
		close(p.done)
	}
	t.Cleanup(p.close)
	return p
}

func (p *testPub) close() {
	p.cancel()
	p.pub.Close()
	if p.router != nil {
		p.router.Close()
	}
	<-p.done
}

func (p *testPub) serve() {
	defer close(p.done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		id, from := msg.Frames[0], int64(binary.BigEndian.Uint64(msg.Frames[2]))
		p.mu.Lock()
		var seqs []int64
		for s := range p.kept {
			if s >= from {
				seqs = append(seqs, s)
			}
		}
		for i := range seqs { // sort, small
			for j := i + 1; j < len(seqs); j++ {
				if seqs[j] < seqs[i] {
					seqs[i], seqs[j] = seqs[j], seqs[i]
				}
			}
		}
		for _, s := range seqs {
			_ = p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, be(s), p.kept[s]))
		}
		p.mu.Unlock()
		_ = p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, be(-1), []byte{}))
	}
}

func be(s int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(s))
	return b[:]
}

// send keeps batch seq for replay and, unless drop, publishes it.
func (p *testPub) send(seq int64, payload []byte, drop bool) {
	p.mu.Lock()
	p.kept[seq] = payload
	p.mu.Unlock()
	if !drop {
		if err := p.pub.SendMulti(zmq4.NewMsgFrom([]byte("t"), be(seq), payload)); err != nil {
			p.t.Fatal(err)
		}
	}
}

// storedPayload is a map-encoded batch storing blocks of 4 tokens
// (hashes[i] the engine's name of block i) after parent (0: none).
func storedPayload(t *testing.T, hashes []uint64, parent uint64, toks []int64) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	enc := func(v any) {
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	var par any
	if parent != 0 {
		par = parent
	}
	enc(map[string]any{"ts": float64(time.Now().UnixNano()) / 1e9, "events": []any{map[string]any{
		"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": par, "token_ids": toks,
		"block_size": 4, "lora_id": nil, "medium": "GPU", "lora_name": nil,
	}}})
	return buf.Bytes()
}

func clearedPayload() []byte {
	b, _ := msgpack.Marshal([]any{1.0, []any{[]any{"AllBlocksCleared"}}})
	return b
}

// waitFor polls cond until it holds; a generous deadline for what must
// happen (the machine may be loaded).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startHub(t *testing.T, ws []Worker, o Options) *Hub {
	t.Helper()
	if o.Log == nil {
		o.Log, _ = logtest.NewNullLogger()
	}
	h, err := New(ws, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func stateOf(h *Hub, base string) WorkerStats {
	for _, s := range h.Stats() {
		if s.Base == base {
			return s
		}
	}
	return WorkerStats{}
}

// connected waits until the hub's SUB is subscribed to p: it publishes
// AllBlocksCleared batches from seq 0 until one is seen (a PUB drops what
// it sends before the subscription reaches it), and returns the next seq.
func connected(t *testing.T, h *Hub, p *testPub, base string) int64 {
	t.Helper()
	seq := int64(0)
	waitFor(t, "the subscription", func() bool {
		if stateOf(h, base).Batches > 0 {
			return true
		}
		p.send(seq, clearedPayload(), false)
		seq++
		time.Sleep(20 * time.Millisecond)
		return stateOf(h, base).Batches > 0
	})
	return seq
}

func TestHubGapReplay(t *testing.T) {
	p := newTestPub(t, true)
	w := Worker{Pool: "decode", Base: "http://127.0.0.1:9001", Events: p.ep, Replay: p.rp}
	h := startHub(t, []Worker{w}, Options{BlockSize: 4})
	seq := connected(t, h, p, w.Base)
	before := stateOf(h, w.Base).Replayed // the history from seq 0 a late subscription replays
	toks := seq0(12)
	p.send(seq, storedPayload(t, []uint64{11}, 0, toks[:4]), false)
	p.send(seq+1, storedPayload(t, []uint64{12}, 11, toks[4:8]), true) // lost on the PUB
	p.send(seq+2, storedPayload(t, []uint64{13}, 12, toks[8:12]), false)
	waitFor(t, "three blocks", func() bool { return h.Index().Blocks(w.Base) == 3 })
	got, ok := h.Index().Cached(w.Base, upstream.CacheKey{Tokens: toks})
	s := stateOf(h, w.Base)
	if !ok || got != 12 || s.Gaps != 1 || s.Replayed-before != 1 || s.State != StateLive {
		t.Fatalf("Cached %d %v, stats %+v; want 12 tokens, one gap, one replayed batch, live", got, ok, s)
	}
}

// A new connection asks for the publisher's buffered history at once: an
// idle worker (it publishes nothing) is usable without waiting for its next
// batch, and the history's batches arriving live too are not applied twice.
func TestHubConnectReplaysHistory(t *testing.T) {
	p := newTestPub(t, true)
	toks := seq0(12)
	p.send(0, clearedPayload(), true)
	p.send(1, storedPayload(t, []uint64{11, 12}, 0, toks[:8]), true)
	p.send(2, storedPayload(t, []uint64{13}, 12, toks[8:12]), true)
	w := Worker{Pool: "decode", Base: "http://127.0.0.1:9007", Events: p.ep, Replay: p.rp}
	h := startHub(t, []Worker{w}, Options{BlockSize: 4})
	waitFor(t, "the replayed history", func() bool {
		got, ok := h.Index().Cached(w.Base, upstream.CacheKey{Tokens: toks})
		return ok && got == 12
	})
	if s := stateOf(h, w.Base); s.State != StateLive || s.Replayed != 3 || s.Batches != 3 {
		t.Fatalf("%+v", s)
	}
	// A batch already replayed, arriving live (it was in flight), is
	// skipped; the next one applies.
	waitFor(t, "the live batch", func() bool {
		p.send(2, storedPayload(t, []uint64{13}, 12, toks[8:12]), false)
		p.send(3, storedPayload(t, []uint64{21}, 0, seq(500, 4)), false)
		time.Sleep(10 * time.Millisecond)
		return h.Index().Blocks(w.Base) == 4
	})
	if s := stateOf(h, w.Base); s.Gaps != 0 || s.Restarts != 0 {
		t.Fatalf("a duplicate was taken for a gap or a restart: %+v", s)
	}
}

// An idle publisher that has buffered nothing holds nothing: with replay
// the worker is live at once, with no batch.
func TestHubConnectEmptyHistory(t *testing.T) {
	p := newTestPub(t, true)
	w := Worker{Pool: "decode", Base: "http://127.0.0.1:9008", Events: p.ep, Replay: p.rp}
	h := startHub(t, []Worker{w}, Options{BlockSize: 4})
	waitFor(t, "live", func() bool { return stateOf(h, w.Base).State == StateLive })
	if got, ok := h.Index().Cached(w.Base, upstream.CacheKey{Tokens: seq0(8)}); !ok || got != 0 {
		t.Fatalf("Cached = %d, %v", got, ok)
	}
}

func TestHubGapWithoutReplay(t *testing.T) {
	p := newTestPub(t, false)
	w := Worker{Pool: "decode", Base: "http://127.0.0.1:9002", Events: p.ep}
	log, hook := logtest.NewNullLogger()
	h := startHub(t, []Worker{w}, Options{BlockSize: 4, Log: log})
	seq := connected(t, h, p, w.Base)
	toks := seq0(8)
	p.send(seq, storedPayload(t, []uint64{11}, 0, toks[:4]), false)
	p.send(seq+1, storedPayload(t, []uint64{12}, 11, toks[4:8]), true)
	p.send(seq+2, clearedPayload(), true)
	p.send(seq+3, storedPayload(t, []uint64{21}, 0, toks[:4]), false)
	waitFor(t, "the gap", func() bool { return stateOf(h, w.Base).Gaps == 1 })
	waitFor(t, "the batch after the gap", func() bool { return stateOf(h, w.Base).Batches >= 3 })
	if _, ok := h.Index().Cached(w.Base, upstream.CacheKey{Tokens: toks}); ok {
		t.Fatal("a gapped worker was trusted")
	}
	if s := stateOf(h, w.Base); s.State != StateGapped {
		t.Fatalf("state %q, want gapped", s.State)
	}
	// AllBlocksCleared is a fresh start: trusted again.
	p.send(seq+4, clearedPayload(), false)
	p.send(seq+5, storedPayload(t, []uint64{31}, 0, toks[:4]), false)
	waitFor(t, "the fresh start", func() bool {
		got, ok := h.Index().Cached(w.Base, upstream.CacheKey{Tokens: toks})
		return ok && got == 4
	})
	found := false
	for _, e := range hook.AllEntries() {
		found = found || strings.Contains(e.Message, "not replayable")
	}
	if !found {
		t.Fatal("the unreplayable gap was not logged")
	}
}

// A publisher that goes away: its view is trusted for stale_after, then
// not; the hub keeps reconnecting.
func TestHubStaleAfterDisconnect(t *testing.T) {
	p := newTestPub(t, false)
	w := Worker{Pool: "decode", Base: "http://127.0.0.1:9003", Events: p.ep}
	h := startHub(t, []Worker{w}, Options{BlockSize: 4, StaleAfter: 300 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	connected(t, h, p, w.Base)
	if _, ok := h.Index().Cached(w.Base, upstream.CacheKey{Tokens: seq0(8)}); !ok {
		t.Fatal("a live worker was not trusted")
	}
	p.close()
	waitFor(t, "the view to go stale", func() bool {
		_, ok := h.Index().Cached(w.Base, upstream.CacheKey{Tokens: seq0(8)})
		return !ok && stateOf(h, w.Base).State == StateStale
	})
}

// A worker that cannot be reached is retried and counted, and logged once,
// not once per attempt.
func TestHubUnreachableRateLimited(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	log, hook := logtest.NewNullLogger()
	w := Worker{Pool: "decode", Base: "http://127.0.0.1:9004", Events: "tcp://" + addr}
	h := startHub(t, []Worker{w}, Options{Log: log, BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond})
	waitFor(t, "50 failed attempts", func() bool { return stateOf(h, w.Base).ConnectFailures >= 50 })
	n := 0
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "cannot reach") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d log lines for %d failed attempts, want 1", n, stateOf(h, w.Base).ConnectFailures)
	}
	if s := stateOf(h, w.Base); s.State != StateConnecting {
		t.Fatalf("state %q, want connecting", s.State)
	}
}

// The bind topology: publishers connect to the hub; the topic names the
// worker (llm-d's kv@<pod>@<model>, the pod an endpoint's host:port).
func TestHubBindTopology(t *testing.T) {
	ws := []Worker{{Pool: "decode", Base: "http://127.0.0.1:9005"}, {Pool: "decode", Base: "http://127.0.0.1:9006/"}}
	h := startHub(t, ws, Options{Bind: "tcp://127.0.0.1:0", BlockSize: 4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(quietLog))
	defer pub.Close()
	if err := pub.Dial(h.BindAddr()); err != nil {
		t.Fatal(err)
	}
	toks := seq0(8)
	seq := int64(0)
	waitFor(t, "the second worker's blocks", func() bool {
		_ = pub.SendMulti(zmq4.NewMsgFrom([]byte("kv@127.0.0.1:9006@m"), be(seq), storedPayload(t, []uint64{1, 2}, 0, toks)))
		seq++
		time.Sleep(10 * time.Millisecond)
		got, ok := h.Index().Cached("http://127.0.0.1:9006", upstream.CacheKey{Tokens: toks})
		return ok && got == 8
	})
	if _, ok := h.Index().Cached("http://127.0.0.1:9005", upstream.CacheKey{Tokens: toks}); ok {
		t.Fatal("a worker without events was trusted")
	}
	if s := stateOf(h, "http://127.0.0.1:9005"); s.State != StateWaiting {
		t.Fatalf("silent worker state %q, want waiting", s.State)
	}
}

func TestNewRefuses(t *testing.T) {
	cases := []struct {
		name string
		ws   []Worker
		o    Options
		want string
	}{
		{"none", nil, Options{}, "no worker"},
		{"no endpoint", []Worker{{Base: "http://a:1"}}, Options{}, "no kv_events endpoint"},
		{"both topologies", []Worker{{Base: "http://a:1", Events: "tcp://a:2"}}, Options{Bind: "tcp://*:5557"}, "exclusive"},
		{"bad scheme", []Worker{{Base: "http://a:1", Events: "ipc:///tmp/x"}}, Options{}, "want tcp://host:port"},
		{"bad port", []Worker{{Base: "http://a:1", Events: "tcp://a:x"}}, Options{}, "bad port"},
		{"bad replay", []Worker{{Base: "http://a:1", Events: "tcp://a:2", Replay: "tcp://a"}}, Options{}, "kv_replay"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.ws, c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

func seq0(n int) []int64 { return seq(0, n) }
