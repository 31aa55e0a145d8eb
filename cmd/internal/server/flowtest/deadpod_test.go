package flowtest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/sim"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	_ "github.com/celflow/celflow/nodes/all"
)

// Issue 19, "no stranded KV": a decode endpoint that is dead but still
// listed (direct mode: a pool entry nothing listens on; gateway mode: a
// gateway member that refuses connections) costs no request and strands no
// prefilled KV. The flows are the real front, prefill and decode nodes and
// the real upstream client against celflow sim workers on 127.0.0.1; the
// prefills whose decode never arrived are counted from the sims' records:
// a prefill answered 200 for a request id with no decode answered 200 (a
// sim decode answers 200 only after pulling the prefill's KV).

const deadPodPD = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: pd, version: "1"}
defaults: {kv_connector: kv-nixl}
nodes:
  - id: prefill
    type: prefill
  - id: decode
    type: decode
    needs: [prefill]
`

// deadURL is a 127.0.0.1 base URL nothing listens on: a connection is refused.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// serveWorkflow serves yaml on the chat route through the real front.
func serveWorkflow(t *testing.T, yaml string, up *upstream.Client) string {
	t.Helper()
	wf, ds := engine.Load("deadpod.yaml", []byte(yaml), engine.LoadOptions{Upstream: up})
	if ds.HasErrors() || wf == nil {
		t.Fatalf("load: %v", ds)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	srv := front.New(front.Options{Runners: map[engine.Route]engine.Runner{engine.RouteChat: wf}, Log: log})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

// chat posts one chat request with a request id and returns its status and body.
func chat(t *testing.T, base, id, text string, stream bool) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","max_tokens":4,"stream":%v,"messages":[{"role":"user","content":%q}]}`, stream, text)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s: %v", id, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stranded counts, over the given sims' records, the request ids whose
// prefill answered 200 and whose decode never did, and the decode legs.
func stranded(t *testing.T, sims ...string) (n, prefills, decodes int) {
	t.Helper()
	prefilled := map[string]bool{}
	decoded := map[string]bool{}
	for _, s := range sims {
		recs, _ := simRecords(t, s, 0)
		for _, r := range recs {
			if r.Status != http.StatusOK || !r.Done {
				continue
			}
			switch legKind(r) {
			case "prefill":
				prefilled[r.Headers.Get("X-Request-Id")] = true
			case "decode":
				decoded[r.Headers.Get("X-Request-Id")] = true
				decodes++
			}
		}
	}
	for id := range prefilled {
		if !decoded[id] {
			n++
			t.Logf("stranded: %s", id)
		}
	}
	return n, len(prefilled), decodes
}

// Direct mode: decode pool [dead, d0, d1], kept in rotation (the failure
// threshold is too high to eject it), 60 requests 8 at a time.
func TestDeadDecodeEndpointDirect(t *testing.T) {
	p0 := startSim(t, "--roles", "prefill", "--name", "p0")
	d0 := startSim(t, "--roles", "decode", "--name", "d0")
	d1 := startSim(t, "--roles", "decode", "--name", "d1")
	up, err := upstream.New(upstream.Config{Mode: "direct", FailureThreshold: 1 << 20, Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RolePrefill: {{URL: p0}},
		upstream.RoleDecode:  {{URL: deadURL(t)}, {URL: d0}, {URL: d1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	base := serveWorkflow(t, deadPodPD, up)
	const n, conc = 60, 8
	var failed atomic.Int32
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if code, body := chat(t, base, fmt.Sprintf("dead-direct-%d", i), fmt.Sprintf("prompt %d", i), i%2 == 0); code != 200 {
				failed.Add(1)
				t.Errorf("request %d: %d %.200s", i, code, body)
			}
		}()
	}
	wg.Wait()
	left, prefills, decodes := stranded(t, p0, d0, d1)
	t.Logf("%d requests, %d failed, %d prefills, %d decodes answered, %d prefills whose decode never arrived", n, failed.Load(), prefills, decodes, left)
	if failed.Load() != 0 || left != 0 || prefills != n || decodes != n {
		t.Fatalf("failed %d, stranded %d, prefills %d, decodes %d; want 0, 0, %d, %d", failed.Load(), left, prefills, decodes, n, n)
	}
}

// Gateway mode: the sim gateway still routes decode to a dead pod (round
// robin over [dead, d0]); its 502 is answered by asking the gateway again.
// Requests go one at a time, so the gateway's rotation alternates and every
// request's first decode goes to the dead pod.
func TestDeadDecodePodGateway(t *testing.T) {
	p0 := startSim(t, "--roles", "prefill", "--name", "p0")
	d0 := startSim(t, "--roles", "decode", "--name", "d0")
	gw := startSim(t, "gateway", "--prefill", p0, "--decode", deadURL(t)+","+d0)
	up, err := upstream.New(upstream.Config{Mode: "gateway", Gateway: gw})
	if err != nil {
		t.Fatal(err)
	}
	base := serveWorkflow(t, deadPodPD, up)
	const n = 20
	failed := 0
	for i := range n {
		if code, body := chat(t, base, fmt.Sprintf("dead-gw-%d", i), fmt.Sprintf("gateway prompt %d", i), i%2 == 1); code != 200 {
			failed++
			t.Errorf("request %d: %d %.200s", i, code, body)
		}
	}
	recs, _ := simRecords(t, gw, 0)
	dead := 0
	for _, r := range recs {
		if legKind(r) == "decode" && r.Status == http.StatusBadGateway {
			dead++
		}
	}
	left, prefills, decodes := stranded(t, p0, d0)
	t.Logf("%d requests, %d failed, %d decodes sent to the dead pod, %d prefills whose decode never arrived", n, failed, dead, left)
	if failed != 0 || left != 0 || prefills != n || decodes != n {
		t.Fatalf("failed %d, stranded %d, prefills %d, decodes %d", failed, left, prefills, decodes)
	}
	if dead == 0 {
		t.Fatal("the gateway never routed to the dead pod: the test did not test anything")
	}
}

// drainer is a real net/http worker that streams SSE until released, and
// once told to drain answers new requests 503 (with Retry-After, or with
// Connection: close), as a vLLM on its way out does.
type drainer struct {
	srv      *httptest.Server
	draining atomic.Bool
	close    bool // Connection: close instead of Retry-After
	started  chan struct{}
	release  chan struct{}
	legs     atomic.Int32
	refused  atomic.Int32
}

func newDrainer(t *testing.T, close bool) *drainer {
	d := &drainer{close: close, started: make(chan struct{}, 1), release: make(chan struct{})}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		d.legs.Add(1)
		if d.draining.Load() {
			d.refused.Add(1)
			if d.close {
				w.Header().Set("Connection", "close")
			} else {
				w.Header().Set("Retry-After", "30")
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"draining"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		fl.Flush()
		d.started <- struct{}{}
		select {
		case <-d.release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(d.srv.Close)
	return d
}

// Issue 19, graceful drain: a worker that answers 503 with Retry-After (or
// with Connection: close) is draining, not failed: it gets no new legs,
// the leg that met the 503 goes to another worker (the client sees 200),
// its stream in flight completes, no ejection is counted (the failure
// threshold is 1), and Health says draining.
func TestDrainingDecodeWorker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close bool
	}{{"retry-after", false}, {"connection-close", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dr := newDrainer(t, tc.close)
			d0 := startSim(t, "--roles", "decode", "--name", "d0")
			up, err := upstream.New(upstream.Config{Mode: "direct", FailureThreshold: 1, Pools: map[upstream.Role][]upstream.Endpoint{
				upstream.RoleDecode: {{URL: dr.srv.URL}, {URL: d0}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var events []upstream.HealthEvent
			up.SetHealthHook(func(ev upstream.HealthEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() })
			base := serveWorkflow(t, `apiVersion: celflow/v1
kind: Workflow
metadata: {name: decode-only, version: "1"}
nodes:
  - {id: decode, type: decode}
`, up)
			// The stream in flight: round robin starts at the drainer.
			type result struct {
				code int
				body string
			}
			inflight := make(chan result, 1)
			go func() {
				code, body := chat(t, base, "drain-inflight", "long stream", true)
				inflight <- result{code, body}
			}()
			select {
			case <-dr.started:
			case <-time.After(10 * time.Second):
				t.Fatal("the stream never reached the drainer")
			}
			dr.draining.Store(true)
			for i := range 10 {
				if code, body := chat(t, base, fmt.Sprintf("drain-%d", i), fmt.Sprintf("drain prompt %d", i), false); code != 200 {
					t.Fatalf("request %d during the drain: %d %s", i, code, body)
				}
			}
			close(dr.release)
			r := <-inflight
			if r.code != 200 || !strings.Contains(r.body, "[DONE]") || !strings.Contains(r.body, `"content":"b"`) {
				t.Fatalf("the stream in flight: %d %q", r.code, r.body)
			}
			if n := dr.refused.Load(); n != 1 {
				t.Fatalf("the draining worker was sent %d new legs, want 1 (the one that learnt it drains)", n)
			}
			h := up.Health()
			if len(h) != 1 || h[0].Draining != 1 || h[0].Healthy != 1 {
				t.Fatalf("health %+v", h)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range events {
				if ev.Ejected || !ev.Draining {
					t.Fatalf("events %+v: a drain is not an ejection", events)
				}
			}
			if len(events) != 1 {
				t.Fatalf("events %+v", events)
			}
		})
	}
}

// A worker that shuts down gracefully (net/http's Shutdown: it stops
// accepting, finishes what it has) loses no request: its stream in flight
// completes and the new legs it refuses go to another worker.
func TestShutdownDecodeWorker(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	d0 := startSim(t, "--roles", "decode", "--name", "d0")
	up, err := upstream.New(upstream.Config{Mode: "direct", Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RoleDecode: {{URL: "http://" + ln.Addr().String()}, {URL: d0}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	base := serveWorkflow(t, "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: d, version: \"1\"}\nnodes:\n  - {id: decode, type: decode}\n", up)
	inflight := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			inflight <- err.Error()
			return
		}
		defer resp.Body.Close()
		var sb strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			sb.WriteString(sc.Text() + "\n")
		}
		inflight <- sb.String()
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never started")
	}
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	// Shutdown closes the listener at once; wait until a connect is refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener stayed open")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 6 {
		if code, body := chat(t, base, fmt.Sprintf("shut-%d", i), fmt.Sprintf("shutdown prompt %d", i), false); code != 200 {
			t.Fatalf("request %d during the shutdown: %d %s", i, code, body)
		}
	}
	close(release)
	if body := <-inflight; !strings.Contains(body, "[DONE]") {
		t.Fatalf("the stream in flight: %q", body)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// Issue 18, decode fallback: when decode's own pool fails before the first
// byte on every endpoint (one worker answers 503, the other is dead), the
// leg goes to the fallback pool with the same KV hand-off; the client sees
// 200 and no prefill is stranded.
func TestDecodeFallbackPool(t *testing.T) {
	p0 := startSim(t, "--roles", "prefill", "--name", "p0")
	busy := startSim(t, "--roles", "decode", "--name", "busy", "--fault", "decode:status=503")
	spare := startSim(t, "--roles", "decode", "--name", "spare")
	up, err := upstream.New(upstream.Config{Mode: "direct", FailureThreshold: 1 << 20, Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RolePrefill: {{URL: p0}},
		upstream.RoleDecode:  {{URL: busy}, {URL: deadURL(t)}},
		"decode-spare":       {{URL: spare}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	base := serveWorkflow(t, deadPodPD+"    params: {fallback: {pool: decode-spare}}\n", up)
	const n = 10
	for i := range n {
		if code, body := chat(t, base, fmt.Sprintf("fallback-%d", i), fmt.Sprintf("fallback prompt %d", i), i%2 == 0); code != 200 {
			t.Fatalf("request %d: %d %.300s", i, code, body)
		}
	}
	left, prefills, decodes := stranded(t, p0, busy, spare)
	recs, _ := simRecords(t, busy, 0)
	t.Logf("%d requests, %d legs met the 503 worker, %d decodes answered by the fallback pool, %d stranded", n, len(recs), decodes, left)
	if left != 0 || prefills != n || decodes != n {
		t.Fatalf("stranded %d, prefills %d, decodes %d", left, prefills, decodes)
	}
	spareRecs, _ := simRecords(t, spare, 0)
	if len(spareRecs) != n || len(recs) != n {
		t.Fatalf("spare took %d legs, the busy worker %d; want %d each", len(spareRecs), len(recs), n)
	}
}

// The same fallback through a gateway: the sim gateway's decode pool holds
// only a dead pod, and the InferencePool "decode-spare", which its
// HTTPRoute selects by X-Celflow-Pool, a live one. celflow asks the gateway
// three times, then once more with X-Celflow-Pool: decode-spare.
func TestDecodeFallbackPoolGateway(t *testing.T) {
	p0 := startSim(t, "--roles", "prefill", "--name", "p0")
	spare := startSim(t, "--roles", "decode", "--name", "spare")
	g, err := sim.NewGateway(sim.GatewayConfig{Prefill: []string{p0}, Decode: []string{deadURL(t)},
		Pools: map[string][]string{"decode-spare": {spare}}})
	if err != nil {
		t.Fatal(err)
	}
	gs := httptest.NewServer(g)
	t.Cleanup(gs.Close)
	up, err := upstream.New(upstream.Config{Mode: "gateway", Gateway: gs.URL})
	if err != nil {
		t.Fatal(err)
	}
	base := serveWorkflow(t, deadPodPD+"    params: {fallback: {pool: decode-spare}}\n", up)
	const n = 8
	for i := range n {
		if code, body := chat(t, base, fmt.Sprintf("fallback-gw-%d", i), fmt.Sprintf("fallback gateway prompt %d", i), i%2 == 1); code != 200 {
			t.Fatalf("request %d: %d %.300s", i, code, body)
		}
	}
	left, prefills, decodes := stranded(t, p0, spare)
	dead, spared := 0, 0
	for _, r := range g.Records().Since(0).Records {
		if legKind(r) != "decode" {
			continue
		}
		switch r.Headers.Get(upstream.PoolHeader) {
		case "":
			if r.Status == http.StatusBadGateway {
				dead++
			}
		case "decode-spare":
			spared++
		}
	}
	t.Logf("%d requests, %d decodes met the dead pod, %d went to decode-spare, %d stranded", n, dead, spared, left)
	if left != 0 || prefills != n || decodes != n || dead != 3*n || spared != n {
		t.Fatalf("stranded %d, prefills %d, decodes %d, dead-pod legs %d, spare legs %d", left, prefills, decodes, dead, spared)
	}
}
