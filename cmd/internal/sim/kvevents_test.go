package sim

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/celflow/celflow/connectors/kvevents"
	"github.com/celflow/celflow/connectors/upstream"
)

// kvSim is a celflow-sim run in-process (Start) with KV events.
type kvSim struct {
	url, events, replay string
	stop                func() int
}

func startKVSim(t *testing.T, args ...string) *kvSim {
	t.Helper()
	base := []string{"--listen", "127.0.0.1:0", "--roles", "decode", "--block-size", "16",
		"--kv-events-endpoint", "tcp://127.0.0.1:0", "--kv-events-replay-endpoint", "tcp://127.0.0.1:0"}
	url, stop, err := Start(append(base, args...))
	if err != nil {
		t.Fatal(err)
	}
	s := &kvSim{url: url, stop: stop}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			s.stop()
		}
	})
	s.stop = func() int { stopped = true; return stop() }
	resp, err := http.Get(url + "/sim/kv-events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var where struct{ Endpoint, Replay string }
	if err := json.NewDecoder(resp.Body).Decode(&where); err != nil {
		t.Fatal(err)
	}
	s.events, s.replay = where.Endpoint, where.Replay
	return s
}

// complete sends a completions request with the token ids of prompt and
// returns the worker's usage.prompt_tokens_details.cached_tokens.
func complete(t *testing.T, url string, prompt []int64) int {
	t.Helper()
	ids, _ := json.Marshal(prompt)
	status, _, body := post(t, url+"/v1/completions", fmt.Sprintf(`{"model":"sim-model","prompt":%s,"max_tokens":1}`, ids))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var r struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Usage.Details.Cached
}

func hubFor(t *testing.T, o kvevents.Options, sims ...*kvSim) *kvevents.Hub {
	t.Helper()
	var ws []kvevents.Worker
	for _, s := range sims {
		w := kvevents.Worker{Pool: "decode", Base: s.url}
		if o.Bind == "" {
			w.Events, w.Replay = s.events, s.replay
		}
		ws = append(ws, w)
	}
	if o.Log == nil {
		o.Log, _ = logtest.NewNullLogger()
	}
	o.BlockSize = 16
	h, err := kvevents.New(ws, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func waitKV(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func stats(h *kvevents.Hub, base string) kvevents.WorkerStats {
	for _, s := range h.Stats() {
		if s.Base == base {
			return s
		}
	}
	return kvevents.WorkerStats{}
}

func tokens(from, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(from + i)
	}
	return out
}

// waitSubscribed waits until the hub reads the sim's events: it sends
// prompts of one block (distinct, so each publishes a BlockStored) until
// a batch arrives.
func waitSubscribed(t *testing.T, h *kvevents.Hub, s *kvSim) { waitSubscribedURL(t, h, s.url) }

func waitSubscribedURL(t *testing.T, h *kvevents.Hub, url string) {
	t.Helper()
	i := 0
	waitKV(t, "the subscription", func() bool {
		if stats(h, url).State == kvevents.StateLive {
			return true
		}
		complete(t, url, tokens(1_000_000+i*100, 17))
		i++
		return false
	})
}

// The sim's encoder (its own) and the subscriber's decoder agree in both
// msgspec encodings, through real sockets: the index learns what the
// worker caches, as many tokens as the worker reports cached.
func TestSimKVEventsEncodings(t *testing.T) {
	for _, enc := range []string{"map", "array"} {
		t.Run(enc, func(t *testing.T) {
			s := startKVSim(t, "--kv-events-encoding", enc)
			h := hubFor(t, kvevents.Options{}, s)
			waitSubscribed(t, h, s)
			prompt := tokens(7, 40) // two whole blocks and a partial one
			if c := complete(t, s.url, prompt); c != 0 {
				t.Fatalf("first request cached %d", c)
			}
			waitKV(t, "the index to hold the prompt", func() bool {
				got, ok := h.Index().Cached(s.url, upstream.CacheKey{Tokens: prompt})
				return ok && got == 32
			})
			if c := complete(t, s.url, prompt); c != 32 {
				t.Fatalf("the worker reports %d cached, the index 32", c)
			}
		})
	}
}

// Evictions reach the index: a sim with room for 4 blocks evicts the first
// prompt's blocks, and the index stops predicting them.
func TestSimKVEventsEviction(t *testing.T) {
	s := startKVSim(t, "--kv-cache-blocks", "4")
	h := hubFor(t, kvevents.Options{}, s)
	waitSubscribed(t, h, s)
	a, b := tokens(10_000, 33), tokens(20_000, 65)
	complete(t, s.url, a)
	waitKV(t, "a's blocks", func() bool { got, _ := h.Index().Cached(s.url, upstream.CacheKey{Tokens: a}); return got == 32 })
	complete(t, s.url, b) // four blocks: a's two go
	waitKV(t, "a's eviction", func() bool { got, _ := h.Index().Cached(s.url, upstream.CacheKey{Tokens: a}); return got == 0 })
	if c := complete(t, s.url, a); c != 0 {
		t.Fatalf("the worker still held %d of a's tokens", c)
	}
}

// freeAddr is a 127.0.0.1 port nothing listens on (to restart a sim on
// the same addresses).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Issue 20: one sim restarted mid-run (its cache lost): the index drops the
// worker's blocks before its next event batch is applied (the reconnect
// starts the view over), predicts no hit the worker would not give, and
// the hit rate recovers.
func TestSimKVEventsRestart(t *testing.T) {
	listen, ev, rp := freeAddr(t), freeAddr(t), freeAddr(t)
	args := []string{"--listen", listen, "--kv-events-endpoint", "tcp://" + ev, "--kv-events-replay-endpoint", "tcp://" + rp}
	s := startKVSim(t, args...)
	other := startKVSim(t)
	h := hubFor(t, kvevents.Options{BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}, s, other)
	waitSubscribed(t, h, s)
	waitSubscribed(t, h, other)
	prompt := tokens(500, 40)
	complete(t, s.url, prompt)
	complete(t, other.url, prompt)
	waitKV(t, "both indexes", func() bool {
		a, _ := h.Index().Cached(s.url, upstream.CacheKey{Tokens: prompt})
		b, _ := h.Index().Cached(other.url, upstream.CacheKey{Tokens: prompt})
		return a == 32 && b == 32
	})
	restarts := stats(h, s.url).Restarts
	s.stop()
	waitKV(t, "the lost connection", func() bool { return stats(h, s.url).Restarts > restarts })
	s = startKVSim(t, args...)
	// Reconnected: the view started over, before any batch of the new
	// process is applied.
	waitKV(t, "the reconnect", func() bool {
		st := stats(h, s.url)
		return st.State == kvevents.StateWaiting || st.State == kvevents.StateLive
	})
	if n := h.Index().Blocks(s.url); n != 0 {
		t.Fatalf("%d blocks of the old process survived the restart", n)
	}
	if got, ok := h.Index().Cached(s.url, upstream.CacheKey{Tokens: prompt}); ok && got != 0 {
		t.Fatalf("the restarted worker is predicted to hold %d tokens", got)
	}
	// The other worker's view is untouched.
	if got, _ := h.Index().Cached(other.url, upstream.CacheKey{Tokens: prompt}); got != 32 {
		t.Fatalf("the other worker's view lost its blocks: %d", got)
	}
	// The hit rate recovers: the first request misses (cache lost), the
	// index learns it, the next one hits where the index says.
	if c := complete(t, s.url, prompt); c != 0 {
		t.Fatalf("the restarted worker reported %d cached", c)
	}
	waitKV(t, "the index to learn the new cache", func() bool {
		got, ok := h.Index().Cached(s.url, upstream.CacheKey{Tokens: prompt})
		return ok && got == 32
	})
	if c := complete(t, s.url, prompt); c != 32 {
		t.Fatalf("after the restart the worker reports %d cached, the index 32", c)
	}
}

// Issue 20: sims whose engine hash seeds differ publish different block
// hashes for the same blocks; the index's views are identical.
func TestSimKVEventsHashSeed(t *testing.T) {
	a := startKVSim(t, "--kv-hash-seed", "1")
	b := startKVSim(t, "--kv-hash-seed", "18446744073709551557")
	h := hubFor(t, kvevents.Options{}, a, b)
	waitSubscribed(t, h, a)
	waitSubscribed(t, h, b)
	prompts := [][]int64{tokens(300, 50), append(tokens(300, 32), tokens(900, 40)...), tokens(77, 16)}
	for _, p := range prompts {
		complete(t, a.url, p)
		complete(t, b.url, p)
	}
	waitKV(t, "both views", func() bool {
		ga, _ := h.Index().Cached(a.url, upstream.CacheKey{Tokens: prompts[1]})
		gb, _ := h.Index().Cached(b.url, upstream.CacheKey{Tokens: prompts[1]})
		return ga == 64 && gb == 64
	})
	for _, p := range prompts {
		for n := 0; n <= len(p); n++ {
			k := upstream.CacheKey{Tokens: p[:n]}
			ga, oka := h.Index().Cached(a.url, k)
			gb, okb := h.Index().Cached(b.url, k)
			if ga != gb || oka != okb {
				t.Fatalf("prefix of %d: seed 1 says %d %v, the other seed %d %v", n, ga, oka, gb, okb)
			}
		}
	}
}

// The bind topology: sims connect their PUB to celflow's bound SUB and
// name themselves in llm-d's topic form.
func TestSimKVEventsBind(t *testing.T) {
	listen := freeAddr(t)
	h, err := kvevents.New([]kvevents.Worker{{Pool: "decode", Base: "http://" + listen}}, kvevents.Options{Bind: "tcp://127.0.0.1:0", BlockSize: 16, Log: nullLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	url, stop, err := Start([]string{"--listen", listen, "--roles", "decode", "--kv-events-connect", h.BindAddr(),
		"--kv-events-topic", "kv@" + listen + "@sim-model"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	waitSubscribedURL(t, h, url)
	prompt := tokens(40, 33)
	complete(t, url, prompt)
	waitKV(t, "the bound subscriber to learn the prompt", func() bool {
		got, ok := h.Index().Cached(url, upstream.CacheKey{Tokens: prompt})
		return ok && got == 32
	})
}

func nullLog() *logrus.Logger { l, _ := logtest.NewNullLogger(); return l }
