package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kvSimConfig is a direct-mode serve config whose one decode worker, the
// sim at url, publishes KV events at ev (replay at rp).
func kvSimConfig(url, ev, rp string) string {
	return "server: {drain_delay: 0s, shutdown_timeout: 2s" + listen + "}\n" +
		"upstream:\n  pools:\n    decode:\n      - {url: \"" + url + "\", kv_events: \"" + ev + "\", kv_replay: \"" + rp + "\"}\nworkflow: wf.yaml\n"
}

func health(t *testing.T, addr string) string {
	t.Helper()
	resp, err := client.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/health %d: %s", resp.StatusCode, b)
	}
	return string(b)
}

func completeTokens(t *testing.T, addr string, ids []int) {
	t.Helper()
	p, _ := json.Marshal(ids)
	resp, err := client.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":"sim-model","prompt":%s,"max_tokens":1}`, p)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("completions %d: %s", resp.StatusCode, b)
	}
}

// waitFor polls cond for up to 20 s (the front logs a request after its
// reply went out; a subscriber applies events after the sim sent them).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 20: serve subscribes to a decode worker's KV events (a real sim):
// metrics and /health report it by pool and index (never its address); the
// upstream client gets the pool's cache source; a reload with the same
// settings keeps the index; one that switches events off removes the
// series, the /health detail and the source.
func TestServeKVEvents(t *testing.T) {
	url, stop := runSimAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode",
		"--kv-events-endpoint", "tcp://127.0.0.1:0", "--kv-events-replay-endpoint", "tcp://127.0.0.1:0")
	defer stop()
	resp, err := client.Get(url + "/sim/kv-events")
	if err != nil {
		t.Fatal(err)
	}
	var where struct{ Endpoint, Replay string }
	_ = json.NewDecoder(resp.Body).Decode(&where)
	resp.Body.Close()

	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", decodeOnly("kv", "1"))
	cfgPath := writeFile(t, dir, "serve.yaml", kvSimConfig(url, where.Endpoint, where.Replay))
	hup := make(chan os.Signal, 1)
	addr, logs := startServeHUP(t, cfgPath, noEnv, hup)

	const live = `celflow_kv_events_worker_state{pool="decode",state="live",worker="decode[0]"}`
	const blocks = `celflow_kv_index_blocks{pool="decode",worker="decode[0]"}`
	i := 0
	waitFor(t, "the worker's events", func() bool {
		ids := make([]int, 33)
		for k := range ids {
			ids[k] = 1000 + i*40 + k
		}
		i++
		completeTokens(t, addr, ids) // two whole blocks of 16: a BlockStored
		return metric(t, addr, live) == 1
	})
	h := health(t, addr)
	if !strings.Contains(h, `"worker":"decode[0]"`) || !strings.Contains(h, `"state":"live"`) || strings.Contains(h, "127.0.0.1") {
		t.Fatalf("/health: %s", h)
	}
	n := metric(t, addr, blocks)
	if n < 2 {
		t.Fatalf("%s = %v", blocks, n)
	}
	if metric(t, addr, `celflow_kv_events_batches_total{pool="decode",worker="decode[0]"}`) < 1 {
		t.Fatal("no batch counted")
	}

	// The same settings: the hub is lent with the client, the index kept.
	hup <- syscall.SIGHUP
	waitMetric(t, addr, reloadsOK, 1, logs)
	if got := metric(t, addr, blocks); got != n {
		t.Fatalf("a reload with the same settings rebuilt the index: %v blocks, had %v", got, n)
	}

	// Events off: no series, no detail; behaviour as without events.
	writeFile(t, dir, "serve.yaml", "server: {drain_delay: 0s, shutdown_timeout: 2s"+listen+"}\n"+
		"upstream:\n  pools:\n    decode: [\""+url+"\"]\nworkflow: wf.yaml\n")
	hup <- syscall.SIGHUP
	waitMetric(t, addr, reloadsOK, 2, logs)
	if got := metric(t, addr, blocks); got != -1 {
		t.Fatalf("%s still exported (%v) with events off", blocks, got)
	}
	if h := health(t, addr); h != `{"status":"ok"}` {
		t.Fatalf("/health with events off: %s", h)
	}
}

// validate --config and serve --check open no socket: a bind address that
// is taken passes them; serve itself refuses to start on it.
func TestKVEventsValidateOpensNoSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", decodeOnly("kv", "1"))
	cfgPath := writeFile(t, dir, "serve.yaml", "server: {drain_delay: 0s, shutdown_timeout: 2s"+listen+"}\n"+
		"upstream:\n  pools:\n    decode: [\"http://127.0.0.1:1\"]\n  kv_events: {bind: \"tcp://"+l.Addr().String()+"\"}\nworkflow: wf.yaml\n")
	if code, out, errOut := runCmd(validate, "--config", cfgPath); code != 0 {
		t.Fatalf("validate --config: %d %s %s", code, out, errOut)
	}
	logs := &syncBuf{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if code := runServe(ctx, []string{"--config", cfgPath, "--log-format", "json"}, logs, noEnv, nil); code != 1 {
		t.Fatalf("serve on a taken bind address exited %d: %s", code, logs.String())
	}
	if !strings.Contains(logs.String(), "kv events") {
		t.Fatalf("no kv events error logged: %s", logs.String())
	}
}

// startKV installs the hub's view as the decode pool's cache source, and a
// generation without events removes it from a client it shares.
func TestStartKVInstallsSource(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", decodeOnly("kv", "1"))
	cfgPath := writeFile(t, dir, "serve.yaml", kvSimConfig("http://127.0.0.1:1", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"))
	p, ds := prepare(cfgPath, noEnv, prepareOptions{})
	if p == nil {
		t.Fatal(ds.String())
	}
	g := p.gen
	defer g.close(nil)
	if g.kv == nil || g.up.CacheSourceOf("decode") != nil {
		t.Fatal("prepare must build the hub and install nothing")
	}
	if err := g.startKV(); err != nil {
		t.Fatal(err)
	}
	if g.up.CacheSourceOf("decode") == nil {
		t.Fatal("no cache source installed for decode")
	}
	off := &generation{cfg: g.cfg, up: g.up}
	if err := off.startKV(); err != nil {
		t.Fatal(err)
	}
	if g.up.CacheSourceOf("decode") != nil {
		t.Fatal("a generation without events left the source installed")
	}
}
