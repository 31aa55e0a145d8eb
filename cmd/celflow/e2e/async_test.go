//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/cmd/internal/demo"
	"github.com/celflow/celflow/connectors/async/redistest"
)

// Crash safety of the builtin async back end: two `celflow serve`
// replicas share one real redis-server; 500 requests are enqueued through
// the E/P/D workflow (epd-async.yaml) on celflow-sim workers; one replica
// is killed with SIGKILL part way. Every request ends with exactly one
// visible result, all fetched; the killed replica's claims are redelivered
// to the survivor (lease 1 s).
func TestAsyncTwoReplicasOneKilled(t *testing.T) {
	const total = 500
	rs := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	ctx := context.Background()

	dir := t.TempDir()
	workers := map[string]*simProc{}
	for _, r := range roles {
		workers[r] = startSim(t, r, "--listen", "127.0.0.1:0", "--roles", r, "--name", r,
			"--shared-dir", filepath.Join(dir, "kv"), "--ttft", "50ms", "--records", "4096")
	}
	wf, err := demo.Workflow("epd-async.yaml", demo.Overrides{RenderAddress: workers["render"].url, AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "workflow.yaml"), wf)
	cfg := fmt.Sprintf(`server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 5s}
upstream:
  mode: direct
  pools:
    encode: [%s]
    prefill: [%s]
    decode: [%s]
telemetry: {log_level: info, log_format: json}
async:
  redis_url: %s
  lease: 1s
  poll_interval: 100ms
  dispatcher: {concurrency: 16, budget: 64}
workflow: ./workflow.yaml
`, workers["encode"].url, workers["prefill"].url, workers["decode"].url, rs.URL())
	cfgPath := filepath.Join(dir, "celflow.yaml")
	writeFile(t, cfgPath, []byte(cfg))
	start := func(name string) (*proc, string) {
		p := startProc(t, name, "serve", "--config", cfgPath, "--log-format", "json", "-v", "0")
		addr, err := p.waitLine(servingRe, 15*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return p, "http://" + addr
	}
	_, urlA := start("celflow A")
	procB, urlB := start("celflow B")

	// Enqueue through both replicas, 16 at a time.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan string, total)
	for i := 0; i < total; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			base := urlA
			if i%2 == 1 {
				base = urlB
			}
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"async request %d"}]}`, i)
			req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("x-llm-d-async-mode", "enqueue")
			req.Header.Set("x-request-id", "e2e-async-"+strconv.Itoa(i))
			resp, err := httpc.Do(req)
			if err != nil {
				errs <- err.Error()
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 202 {
				errs <- fmt.Sprintf("request %d: enqueue answered %d", i, resp.StatusCode)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}

	// Part way (a fifth done), kill B while it holds claims.
	backlog := "celflow:async:backlog:q:default"
	pidB := procB.cmd.Process.Pid
	heldByB := func() int {
		n := 0
		ps, _ := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "celflow:async:q:default:async",
			Group: "celflow", Start: "-", End: "+", Count: 1000}).Result()
		for _, p := range ps {
			if strings.Contains(p.Consumer, "-"+strconv.Itoa(pidB)+"-") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, _ := rdb.Get(ctx, backlog).Int()
		if n <= total*4/5 && heldByB() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress: backlog %d", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	procB.signal(syscall.SIGKILL)
	procB.wait(5 * time.Second)
	held := heldByB()
	left, _ := rdb.Get(ctx, backlog).Int()
	if held == 0 {
		t.Fatal("replica B held no claim when it was killed: the test proves nothing")
	}
	t.Logf("replica B (pid %d) was killed holding %d claims, %d requests not finished", pidB, held, left)

	// Every result, fetched from A, exactly the one for its request.
	for i := 0; i < total; i++ {
		id := "e2e-async-" + strconv.Itoa(i)
		var status int
		var body string
		for tries := 0; tries < 60; tries++ {
			resp, err := httpc.Get(urlA + "/v1/requests/" + id + "?wait=5")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			status, body = resp.StatusCode, string(b)
			if status != 202 {
				break
			}
		}
		if status != 200 || !strings.Contains(body, `"id":"chatcmpl-`+id+`"`) {
			t.Fatalf("%s: %d %s", id, status, body)
		}
	}
	// Nothing left queued, claimed, counted or dead-lettered.
	if n, _ := rdb.Get(ctx, backlog).Int(); n != 0 {
		t.Errorf("queue backlog %d after every result", n)
	}
	for _, lane := range []string{"interactive", "async", "batch"} {
		s := "celflow:async:q:default:" + lane
		if n := rdb.XLen(ctx, s).Val(); n != 0 {
			t.Errorf("%s still holds %d entries", s, n)
		}
		if p, err := rdb.XPending(ctx, s, "celflow").Result(); err == nil && p.Count != 0 {
			t.Errorf("%s: %d entries still pending", s, p.Count)
		}
	}
	if n := rdb.XLen(ctx, "celflow:async:dead").Val(); n != 0 {
		t.Errorf("%d requests dead-lettered", n)
	}
}
