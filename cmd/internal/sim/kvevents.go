package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// KVEventsConfig makes the worker publish its KV cache's changes as vLLM's
// ZmqEventPublisher does (vllm/distributed/kv_events.py): multipart
// [topic, 8-byte big-endian seq, msgpack KVEventBatch] on a PUB socket,
// and, with Replay, the batches it still buffers on a ROUTER socket.
type KVEventsConfig struct {
	Endpoint string // PUB binds here (tcp://host:port; port 0 picks one)
	Connect  string // PUB connects here instead (a subscriber that binds)
	Replay   string // ROUTER binds here; "" for no replay
	Topic    string // vLLM's default is ""
	Encoding string // "map" (current vLLM) or "array" (vLLM's array_like releases)
	HashSeed uint64 // seeds the engine block hashes the events carry (vLLM's PYTHONHASHSEED role)
	Buffer   int    // batches kept for replay; default 10000, as vLLM's buffer_steps
}

// Enabled reports whether events are published.
func (c KVEventsConfig) Enabled() bool { return c.Endpoint != "" || c.Connect != "" }

// kvPublisher publishes one worker's KV events. Batches are queued in cache
// order (the cache calls publish under its lock) and sent by one goroutine.
type kvPublisher struct {
	cfg    KVEventsConfig
	pub    zmq4.Socket
	router zmq4.Socket
	cancel context.CancelFunc
	wg     sync.WaitGroup // serveReplay
	done   chan struct{}  // closed when run has sent the last batch

	mu     sync.Mutex
	queue  [][]kvEvent
	wake   chan struct{}
	seq    int64
	ring   []kvSent // the last Buffer batches, oldest first
	closed bool

	endpoint, replay string // as bound (port 0 resolved)
}

type kvSent struct {
	seq     int64
	payload []byte
}

// kvEvent is one event before encoding.
type kvEvent struct {
	kind   string // BlockStored, BlockRemoved, AllBlocksCleared
	hashes [][]byte
	parent []byte // nil: none
	tokens []int
	bs     int
	extra  [][]string // per block; nil: no extra keys at all
	lora   string     // BlockStored: lora_name ("" sends nil)
	loraID int        // BlockStored: lora_id (0 sends nil)
}

// quietZMQ swallows zmq4's own log lines.
var quietZMQ = log.New(io.Discard, "", 0)

// startKVPublisher opens the sockets and publishes AllBlocksCleared as the
// first batch (seq 0): a new process holds nothing, and a subscriber that
// replays from 0 learns that.
func startKVPublisher(cfg KVEventsConfig) (*kvPublisher, error) {
	switch cfg.Encoding {
	case "":
		cfg.Encoding = "map"
	case "map", "array":
	default:
		return nil, fmt.Errorf("--kv-events-encoding: want map or array, got %q", cfg.Encoding)
	}
	if cfg.Endpoint != "" && cfg.Connect != "" {
		return nil, errors.New("--kv-events-endpoint and --kv-events-connect are exclusive")
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 10000
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &kvPublisher{cfg: cfg, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{})}
	p.pub = zmq4.NewPub(ctx, zmq4.WithLogger(quietZMQ), zmq4.WithDialerMaxRetries(-1))
	var err error
	if cfg.Endpoint != "" {
		if err = p.pub.Listen(zmqListenAddr(cfg.Endpoint)); err == nil {
			p.endpoint = "tcp://" + p.pub.Addr().String()
		}
	} else {
		// Dial retries until the subscriber is there (vLLM's connect is
		// lazy too); the worker serves meanwhile.
		p.endpoint = cfg.Connect
		go func() { _ = p.pub.Dial(cfg.Connect) }()
	}
	if err != nil {
		cancel()
		p.pub.Close()
		return nil, fmt.Errorf("kv events: %w", err)
	}
	if cfg.Replay != "" {
		p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(quietZMQ))
		if err := p.router.Listen(zmqListenAddr(cfg.Replay)); err != nil {
			cancel()
			p.pub.Close()
			p.router.Close()
			return nil, fmt.Errorf("kv events replay: %w", err)
		}
		p.replay = "tcp://" + p.router.Addr().String()
		p.wg.Add(1)
		go p.serveReplay()
	}
	go p.run()
	p.publish([]kvEvent{{kind: "AllBlocksCleared"}})
	return p, nil
}

// zmqListenAddr turns vLLM's tcp://*:port into one Go can listen on.
func zmqListenAddr(ep string) string { return strings.Replace(ep, "://*:", "://0.0.0.0:", 1) }

// publish queues one batch. Never blocks (the cache holds its lock).
func (p *kvPublisher) publish(evs []kvEvent) {
	if p == nil || len(evs) == 0 {
		return
	}
	p.mu.Lock()
	if !p.closed {
		p.queue = append(p.queue, evs)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *kvPublisher) run() {
	defer close(p.done)
	for {
		p.mu.Lock()
		q := p.queue
		p.queue = nil
		closed := p.closed
		p.mu.Unlock()
		for _, evs := range q {
			p.send(evs)
		}
		if closed {
			return
		}
		<-p.wake
	}
}

func (p *kvPublisher) send(evs []kvEvent) {
	payload := encodeBatch(p.cfg.Encoding, float64(time.Now().UnixNano())/1e9, evs)
	p.mu.Lock()
	seq := p.seq
	p.seq++
	p.ring = append(p.ring, kvSent{seq, payload})
	if len(p.ring) > p.cfg.Buffer {
		p.ring = p.ring[len(p.ring)-p.cfg.Buffer:]
	}
	p.mu.Unlock()
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], uint64(seq))
	_ = p.pub.SendMulti(zmq4.NewMsgFrom([]byte(p.cfg.Topic), sb[:], payload))
}

// serveReplay answers replay requests as vLLM's _service_replay does: a
// request [identity, "", start seq] gets every buffered batch from start as
// [identity, "", seq, payload], then [identity, "", -1, ""].
func (p *kvPublisher) serveReplay() {
	defer p.wg.Done()
	end := make([]byte, 8)
	binary.BigEndian.PutUint64(end, ^uint64(0)) // -1
	for {
		msg, err := p.router.Recv()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			continue
		}
		id := msg.Frames[0]
		start := int64(binary.BigEndian.Uint64(msg.Frames[2]))
		p.mu.Lock()
		ring := append([]kvSent(nil), p.ring...)
		p.mu.Unlock()
		for _, s := range ring {
			if s.seq >= start {
				var sb [8]byte
				binary.BigEndian.PutUint64(sb[:], uint64(s.seq))
				_ = p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, sb[:], s.payload))
			}
		}
		_ = p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, end, []byte{}))
	}
}

// Close stops publishing: queued batches are sent first.
func (p *kvPublisher) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	<-p.done // run sent what was queued
	p.cancel()
	p.pub.Close()
	if p.router != nil {
		p.router.Close()
	}
	p.wg.Wait()
}

// engineHash is the block hash the events carry: sha256 over the seed and
// the cache's own chain key, 32 bytes as vLLM's sha256 hashes are. Another
// seed gives every block another hash; celflow must not care.
func engineHash(seed uint64, k blockKey) []byte {
	var b [24]byte
	binary.BigEndian.PutUint64(b[0:], seed)
	binary.BigEndian.PutUint64(b[8:], k.h)
	binary.BigEndian.PutUint64(b[16:], uint64(k.n))
	s := sha256.Sum256(b[:])
	return s[:]
}

// encodeBatch writes a KVEventBatch as msgspec does: "map" as named fields
// with the tag under "type" (omit_defaults: extra_keys only when set),
// "array" as array_like structs with the tag first.
func encodeBatch(encoding string, ts float64, evs []kvEvent) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.UseCompactInts(true)
	if encoding == "array" {
		_ = e.EncodeArrayLen(3)
		_ = e.EncodeFloat64(ts)
	} else {
		_ = e.EncodeMapLen(3)
		_ = e.EncodeString("ts")
		_ = e.EncodeFloat64(ts)
		_ = e.EncodeString("events")
	}
	_ = e.EncodeArrayLen(len(evs))
	for _, ev := range evs {
		encodeEvent(e, encoding == "array", ev)
	}
	if encoding != "array" {
		_ = e.EncodeString("data_parallel_rank")
	}
	_ = e.EncodeInt(0)
	return buf.Bytes()
}

func encodeEvent(e *msgpack.Encoder, array bool, ev kvEvent) {
	type field struct {
		name string
		put  func()
	}
	var fs []field
	hashes := func() {
		_ = e.EncodeArrayLen(len(ev.hashes))
		for _, h := range ev.hashes {
			_ = e.EncodeBytes(h)
		}
	}
	switch ev.kind {
	case "BlockStored":
		fs = []field{
			{"block_hashes", hashes},
			{"parent_block_hash", func() {
				if ev.parent == nil {
					_ = e.EncodeNil()
				} else {
					_ = e.EncodeBytes(ev.parent)
				}
			}},
			{"token_ids", func() {
				_ = e.EncodeArrayLen(len(ev.tokens))
				for _, t := range ev.tokens {
					_ = e.EncodeInt(int64(t))
				}
			}},
			{"block_size", func() { _ = e.EncodeInt(int64(ev.bs)) }},
			{"lora_id", func() {
				if ev.loraID == 0 {
					_ = e.EncodeNil()
				} else {
					_ = e.EncodeInt(int64(ev.loraID))
				}
			}},
			{"medium", func() { _ = e.EncodeString("GPU") }},
			{"lora_name", func() {
				if ev.lora == "" {
					_ = e.EncodeNil()
				} else {
					_ = e.EncodeString(ev.lora)
				}
			}},
		}
		if ev.extra != nil {
			fs = append(fs, field{"extra_keys", func() {
				_ = e.EncodeArrayLen(len(ev.extra))
				for _, ks := range ev.extra {
					if ks == nil {
						_ = e.EncodeNil()
						continue
					}
					_ = e.EncodeArrayLen(len(ks))
					for _, k := range ks {
						_ = e.EncodeString(k)
					}
				}
			}})
		}
	case "BlockRemoved":
		fs = []field{{"block_hashes", hashes}, {"medium", func() { _ = e.EncodeString("GPU") }}}
	}
	if array {
		_ = e.EncodeArrayLen(1 + len(fs))
		_ = e.EncodeString(ev.kind)
		for _, f := range fs {
			f.put()
		}
		return
	}
	_ = e.EncodeMapLen(1 + len(fs))
	_ = e.EncodeString("type")
	_ = e.EncodeString(ev.kind)
	for _, f := range fs {
		_ = e.EncodeString(f.name)
		f.put()
	}
}
