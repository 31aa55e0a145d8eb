package flowtest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/server/metrics"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/nodes/nodetest"
)

// lockedBuf is a log sink safe for the request goroutines that write it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// celServer serves one workflow through the real front with the real
// metrics and a JSON log it keeps; the workflow must load without error.
type celServer struct {
	url  string
	m    *metrics.Metrics
	logs *lockedBuf
}

func startCELServer(t *testing.T, name, yaml string, up *upstream.Client) *celServer {
	t.Helper()
	wf, ds := engine.Load(name, []byte(yaml), engine.LoadOptions{Upstream: up})
	if wf == nil {
		t.Fatalf("load %s:\n%s", name, ds)
	}
	runners := map[engine.Route]engine.Runner{}
	for _, rt := range engine.Routes {
		if wf.Serves(rt) {
			runners[rt] = wf
		}
	}
	s := &celServer{m: metrics.New(), logs: &lockedBuf{}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	// The engine logs through the standard logger; these tests run one at a
	// time (no t.Parallel), so the buffer is theirs while they run.
	std := logrus.StandardLogger()
	std.SetOutput(s.logs)
	std.SetFormatter(&logrus.JSONFormatter{})
	t.Cleanup(func() { std.SetOutput(io.Discard); std.SetFormatter(&logrus.TextFormatter{}) })
	srv := front.New(front.Options{Runners: runners, Log: log, Observe: s.m.Observe})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

// post sends a chat request and returns the status and body.
func (s *celServer) post(t *testing.T, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// celErrors reads celflow_cel_errors_total{node,expr} from a scrape of the
// metrics handler (what Prometheus reads), 0 when the series is absent.
func (s *celServer) celErrors(t *testing.T, node, expr string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	s.m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	want := fmt.Sprintf(`celflow_cel_errors_total{expr=%q,node=%q} `, expr, node)
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, want); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// Issue 18: an expression that validates and fails at run time for the
// request (int() of a model name that is no number, a division by the
// number of media items on a text chat) is handled as documented under
// defaults.on_cel_error: safe — the request is served, the event counted
// in celflow_cel_errors_total{node,expr} and logged with the request id,
// never the client's business — and answers 500 naming the node under fail
// (the default, counted and logged the same way), one case per expression
// kind, through the real front.
func TestCELErrorPolicyThroughFront(t *testing.T) {
	nodetest.Register()
	const head = "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: celerr, version: \"1\"}\nroutes: [chat]\n"
	const body = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		kind, nodes string
		node, expr  string
		safeStatus  int // the client's status under safe
	}{
		{"guard", `
  - {id: gate, type: t-noop, when: 'int(request.model) > 3'}
  - {id: decode, type: t-decode, needs: [gate]}`, "gate", "guard", 200},
		{"edge", `
  - {id: probe, type: t-cond-decode, params: {status: 412}}
  - {id: fallback, type: t-decode, needs: [{node: probe, if: 'response.status == 412 && 10 / size(media) > 1'}]}
  - {id: decode, type: t-decode, needs: [{node: probe, if: 'response.status == 412'}]}`, "probe", "edge:probe->fallback", 200},
		{"target", `
  - {id: decode, type: t-decode, target: [{if: 'int(request.model) > 3', headers: {x-split: canary}}, {headers: {x-split: main}}]}`,
			"decode", "target[0].if", 200},
		// No retry under safe: the attempt's own failure (t-fail's 503 is a
		// bad gateway, 502) is the answer.
		{"retry", `
  - {id: p, type: t-fail, params: {status: 503}, retry: {attempts: 3, backoff: 1ms, if: 'int(request.model) > 3'}}
  - {id: decode, type: t-decode, needs: [p]}`, "p", "retry.if", 502},
	}
	for _, tc := range tests {
		for _, policy := range []string{"safe", "fail"} {
			t.Run(tc.kind+"/"+policy, func(t *testing.T) {
				// The expression fails on purpose: the load-time search's
				// finding (cel/may-fail) is accepted with allow:.
				at := map[string]string{"guard": "nodes[0].when", "edge": "nodes[1].needs[0].if",
					"target": "nodes[0].target[0].if", "retry": "nodes[0].retry.if"}[tc.kind]
				allow := "allow: [{rule: cel/may-fail, at: '" + at + "'}]\n"
				s := startCELServer(t, tc.kind+".yaml", head+allow+"defaults: {on_cel_error: "+policy+"}\nnodes:"+tc.nodes+"\n", nil)
				const n = 3
				for i := range n {
					status, reply := s.post(t, body, "X-Request-Id", fmt.Sprintf("req-%s-%d", tc.kind, i))
					want := tc.safeStatus
					if policy == "fail" {
						want = 500
					}
					if status != want {
						t.Fatalf("request %d: status %d, want %d: %s", i, status, want, reply)
					}
					if strings.Contains(reply, "int(") || strings.Contains(reply, "size(media)") {
						t.Fatalf("the expression reached the client: %s", reply)
					}
					if policy == "fail" {
						var e struct {
							Error struct{ Message, Code string }
						}
						if json.Unmarshal([]byte(reply), &e) != nil || e.Error.Code != "internal_error" ||
							!strings.HasPrefix(e.Error.Message, tc.node+": ") {
							t.Fatalf("reply %s", reply)
						}
					}
				}
				// The front observes a request after its reply is written:
				// the count of the last one may land just after the client read it.
				eventually(t, fmt.Sprintf("celflow_cel_errors_total{node=%q,expr=%q} to reach %d", tc.node, tc.expr, n), func() bool {
					return s.celErrors(t, tc.node, tc.expr) == n
				})
				// Logged once for the three (one line per 10 s per node and
				// expression), with the first request's id and the error.
				logs := s.logs.String()
				if c := strings.Count(logs, `"msg":"CEL expression failed at run time"`); c != 1 {
					t.Fatalf("%d log lines:\n%s", c, logs)
				}
				expr, _ := json.Marshal(tc.expr) // as the JSON log escapes it (-> is -\u003e)
				if !strings.Contains(logs, `"request_id":"req-`+tc.kind+`-0"`) || !strings.Contains(logs, `"expr":`+string(expr)) ||
					!strings.Contains(logs, `"on_cel_error":"`+policy+`"`) {
					t.Fatalf("log:\n%s", logs)
				}
			})
		}
	}
}

// The same with real node types and celflow sim workers: a guard on
// prefill that fails skips prefill (decode runs aggregated on the worker),
// a target rule whose if fails does not set its header on decode's leg,
// and both are counted.
func TestCELErrorPolicyRealNodes(t *testing.T) {
	worker := startSim(t, "--roles", "prefill,decode", "--name", "w0")
	gateway := startSim(t, "gateway", "--prefill", worker, "--decode", worker)
	up, err := upstream.New(upstream.Config{Gateway: gateway})
	if err != nil {
		t.Fatal(err)
	}
	s := startCELServer(t, "pd.yaml", `apiVersion: celflow/v1
kind: Workflow
metadata: {name: pd-celerr, version: "1"}
routes: [chat]
defaults: {kv_connector: kv-nixl, on_cel_error: safe}
nodes:
  - {id: prefill, type: prefill, when: '10 / size(media) > 1'}
  - id: decode
    type: decode
    needs: [prefill]
    target:
      - {if: 'request.model.split("-")[1] == "big"', headers: {x-split: big}}
`, up)
	_, next := simRecords(t, worker, 0)
	status, reply := s.post(t, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hello there"}]}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, reply)
	}
	recs, _ := simRecords(t, worker, next)
	var paths []string
	for _, r := range recs {
		paths = append(paths, r.Headers.Get("Epp-Profile")+" "+r.Path)
		if r.Headers.Get("X-Split") != "" {
			t.Errorf("a leg carries x-split: %s", r.Headers.Get("X-Split"))
		}
	}
	if len(recs) != 1 || recs[0].Headers.Get("Epp-Profile") != "decode" {
		t.Fatalf("legs %v, want decode only (prefill skipped)", paths)
	}
	eventually(t, "one cel error counted for prefill's guard and one for decode's target rule", func() bool {
		return s.celErrors(t, "prefill", "guard") == 1 && s.celErrors(t, "decode", "target[0].if") == 1
	})
}

// blockingRunner answers 200 once released (or when its client leaves).
type blockingRunner struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingRunner) Serve(r *engine.Run) *engine.Report {
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-r.Ctx.Done():
	}
	w, ok := r.Answer()
	if !ok {
		return &engine.Report{Workflow: "blocking", Err: engine.Errorf(engine.KindInternal, "answered twice")}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", r.Req.ID)
	_, _ = io.WriteString(w, `{"ok":true}`)
	return &engine.Report{Workflow: "blocking", Answered: true}
}

// The admission priority (serve config) that fails at run time for a
// waiting request: the request waits with the default priority 0 and is
// served, the event is counted as celflow_cel_errors_total{node="",
// expr="priority"} and logged once with the request id.
func TestCELErrorPriority(t *testing.T) {
	prio, iss := celenv.CompilePriority(`"x-tier" in request.headers ? int(request.headers["x-tier"]) : 0`)
	if iss != nil {
		t.Fatal(iss)
	}
	m := metrics.New()
	logs := &lockedBuf{}
	log := logrus.New()
	log.SetOutput(logs)
	log.SetFormatter(&logrus.JSONFormatter{})
	run := &blockingRunner{entered: make(chan struct{}, 4), release: make(chan struct{}, 4)}
	srv := front.New(front.Options{Runners: map[engine.Route]engine.Runner{engine.RouteChat: run}, Log: log,
		Observe: m.Observe, AdmissionObserver: m.AdmissionObserver(),
		Admission: front.Admission{Limits: admission.Limits{MaxInFlight: 1, MaxQueue: 4, QueueTimeout: time.Minute}, Priority: prio}})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	// Runs before ts.Close, which waits for the requests: a failing test
	// releases them instead of hanging.
	defer close(run.release)
	s := &celServer{url: ts.URL, m: m}

	type res struct {
		status int
		body   string
	}
	first := make(chan res, 1)
	go func() {
		st, b := s.post(t, `{}`, "X-Request-Id", "holder")
		first <- res{st, b}
	}()
	<-run.entered // the holder has the only slot
	waiter := make(chan res, 1)
	go func() {
		st, b := s.post(t, `{}`, "X-Tier", "gold", "X-Request-Id", "waiter-1")
		waiter <- res{st, b}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.celErrors(t, "", "priority") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the priority error was never counted; logs:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond) // polling a must-happen event, bounded
	}
	run.release <- struct{}{}
	run.release <- struct{}{}
	for _, c := range []chan res{first, waiter} {
		if r := <-c; r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	l := logs.String()
	if strings.Count(l, `"msg":"CEL expression failed at run time"`) != 1 || !strings.Contains(l, `"request_id":"waiter-1"`) ||
		!strings.Contains(l, `"expr":"priority"`) {
		t.Fatalf("logs:\n%s", l)
	}
}
