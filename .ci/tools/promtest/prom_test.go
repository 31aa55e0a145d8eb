//go:build prom

// The dashboard and alert check of issue 21: a real Prometheus (Debian's
// package) scrapes a real `celflow serve` while the test drives load through
// it, then every query of the Grafana dashboard and the measure of every
// alerting rule is evaluated through Prometheus' HTTP API and must return
// data. Run with:
//
//	CELFLOW_BIN=$PWD/bin/celflow CELFLOW_SIM_BIN=$PWD/bin/celflow-sim \
//	  sh -c 'cd .ci/tools && go test -count=1 -tags prom ./promtest/'
//
// promtool first checks the rules file and runs the rules' unit tests
// (.ci/prometheus/celflow-rules.test.yaml). prometheus, promtool and
// redis-server come from PATH (or $PROMETHEUS_BIN,
// $PROMTOOL_BIN, $REDIS_SERVER_BIN). Everything listens on 127.0.0.1.
//
// # Why every query can be required to return data
//
// A query that returns nothing is what a misspelt or removed metric name
// looks like, so the check needs a celflow in which every series the
// dashboard and the rules read exists and moves. The set-up makes that so:
//
//   - direct mode with two prefill workers (the endpoint gauges exist only
//     in direct mode; two endpoints so passive health can eject one);
//   - TLS on the listener (self-signed: the certificate expiry gauge exists
//     only with TLS) and /metrics on a plain listener of its own;
//   - admission with a small bound and queue, and a burst of slow requests,
//     so requests wait (the wait histogram) and at least one gets 429;
//   - async over a real redis-server (the async series exist only then), with
//     one wait-mode and one enqueue-mode request;
//   - requests the simulated prefill workers fail with 503 (X-Sim-Fault):
//     retries, upstream errors, failed nodes, an ejection, 5xx answers;
//   - streamed requests (TTFT) and a repeated prompt (a conditional-decode
//     hit).
//
// The load runs twice, a few scrapes apart: Prometheus 2.42 sees a series
// from its first scrape on, so a counter or histogram created by round one
// (e.g. the first retry) only shows an increase (a non-zero rate, a
// quantile that is not NaN) thanks to round two.
//
// Grafana's variables are substituted first: $__rate_interval (and
// $__interval, $__range) by a window that covers the whole run, and each
// template variable by its "All" value (.*). Queries are evaluated at one
// instant taken after Prometheus scraped celflow past the end of the load.
//
// Alerting rules are loaded by that Prometheus itself (rule_files), so the
// check reads them back as Prometheus parsed them. A healthy system must not
// fire them, so the check evaluates each rule's measure, the left side of its
// one top-level comparison (SplitThreshold; a rule not written as
// `<measure> <op> <threshold>` fails the check), and requires data; the
// whole expression must still evaluate without error.
//
// Data alone is not enough where an expression has a fallback branch (the
// error ratio's `or 0 * ...`): a misspelt name inside it would still return
// data. So every celflow_* name in a query must also be one of the metric
// names Prometheus holds. The last subtest misspells each name in turn and
// requires the check to fail.
package promtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/celflow/celflow/.ci/tools/proctest"
)

const (
	dashboardPath = "docs/deploy/helm/celflow/files/dashboards/celflow.json"
	rulesPath     = "docs/deploy/helm/celflow/files/alerts/celflow-rules.yaml"
	opsDoc        = "docs/operations.md"
	runbookBase   = "https://github.com/celflow/celflow/blob/main/docs/operations.md#"
	// window replaces $__rate_interval: longer than the whole run, so every
	// request of both rounds is inside it.
	window = "5m"
)

var (
	listeningRe = regexp.MustCompile(`^out: listening on (http://127\.0\.0\.1:\d+)$`)
	servingRe   = regexp.MustCompile(`"listen":"(127\.0\.0\.1:\d+)".*"msg":"celflow is serving"`)
	metricsRe   = regexp.MustCompile(`"metrics_listen":"(127\.0\.0\.1:\d+)".*"msg":"serving /metrics on its own listener"`)
	redisReady  = regexp.MustCompile(`Ready to accept connections`)
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

func binary(t *testing.T, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (set $%s or install it; .ci/run does): %v", name, env, err)
	}
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// plain talks to Prometheus and the simulators; celflowc to celflow's TLS
// listener (a self-signed certificate on loopback). Neither uses a proxy.
var (
	plain    = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}
	celflowc = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 60 * time.Second}
)

func startSim(t *testing.T, bin, name string, args ...string) string {
	t.Helper()
	u, err := proctest.Start(t, name, bin, nil, args...).WaitLine(listeningRe, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func startRedis(t *testing.T) string {
	t.Helper()
	port := freePort(t)
	p := proctest.Start(t, "redis-server", binary(t, "REDIS_SERVER_BIN", "redis-server"), nil,
		"--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no",
		"--dir", t.TempDir())
	if _, err := p.WaitLine(redisReady, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("redis://127.0.0.1:%d/0", port)
}

// startCelflow starts the simulated workers and `celflow serve`, and returns
// celflow's https base URL and its metrics address.
func startCelflow(t *testing.T, redisURL string) (string, string) {
	t.Helper()
	celflowBin := binary(t, "CELFLOW_BIN", "celflow")
	simBin := binary(t, "CELFLOW_SIM_BIN", "celflow-sim")
	dir := t.TempDir()
	kv := filepath.Join(dir, "kv")
	w := map[string]string{}
	for _, n := range []string{"render", "encode", "prefill-1", "prefill-2", "decode"} {
		role, _, _ := strings.Cut(n, "-")
		w[n] = startSim(t, simBin, n, "--listen", "127.0.0.1:0", "--roles", role, "--name", n,
			"--shared-dir", kv, "--itl", "1ms")
	}
	cfg := fmt.Sprintf(`server:
  listen: "127.0.0.1:0"
  metrics_listen: "127.0.0.1:0"
  drain_delay: 0s
  shutdown_timeout: 5s
  tls: {self_signed: true}
upstream:
  mode: direct
  render: %s
  pools:
    encode: [%s]
    prefill: [%s, %s]
    decode: [%s]
  health: {failure_threshold: 2, eject_for: 1s}
admission:
  max_in_flight: 4
  max_queue: 2
  queue_timeout: 5s
async:
  redis_url: %s
  key_prefix: "celflow:promtest:"
telemetry: {log_level: info, log_format: json}
workflow: %s
`, w["render"], w["encode"], w["prefill-1"], w["prefill-2"], w["decode"], redisURL,
		filepath.Join(repoRoot(), "workflows", "epd-async.yaml"))
	path := filepath.Join(dir, "celflow.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := proctest.Start(t, "celflow serve", celflowBin, nil, "serve", "--config", path)
	addr, err := p.WaitLine(servingRe, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	maddr, err := p.WaitLine(metricsRe, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := celflowc.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 10s (last: %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return base, maddr
}

// startPrometheus starts Prometheus scraping target every second, with the
// rules file loaded, and returns its API client.
func startPrometheus(t *testing.T, target string) *Client {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: celflow
    static_configs: [{targets: [%q]}]
`, filepath.Join(repoRoot(), rulesPath), target)
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	proctest.Start(t, "prometheus", binary(t, "PROMETHEUS_BIN", "prometheus"), nil,
		"--config.file="+path, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
	c := &Client{Base: fmt.Sprintf("http://127.0.0.1:%d", port), HTTP: plain}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := plain.Get(c.Base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 30s (last: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// post sends one request to celflow and returns the status and body.
func post(t *testing.T, base, path string, hdr map[string]string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := celflowc.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out
}

func chat(content string, stream bool) map[string]any {
	return map[string]any{"model": "sim-model", "stream": stream, "max_tokens": 8,
		"messages": []map[string]any{{"role": "user", "content": content}}}
}

// load is one round of the traffic described in the package comment. It
// returns how many requests were answered 429.
func load(t *testing.T, base string, round int) (n429 int) {
	t.Helper()
	want := func(what string, got, want int, body []byte) {
		t.Helper()
		if got != want {
			t.Errorf("round %d, %s: status %d, want %d: %s", round, what, got, want, body)
		}
	}
	// Plain and streamed requests, two at a time; the repeated prompt is a
	// conditional-decode hit the second time.
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				s, b := post(t, base, "/v1/chat/completions", nil, chat(fmt.Sprintf("round %d worker %d request %d: tell me about disaggregated prefill and decode", round, w, i), false))
				want("chat", s, 200, b)
			}
			s, b := post(t, base, "/v1/chat/completions", nil, chat("the same prompt every time, so that decode has its prefix cached", false))
			want("repeated chat", s, 200, b)
			s, b = post(t, base, "/v1/chat/completions", nil, chat(fmt.Sprintf("round %d worker %d: stream this", round, w), true))
			want("streamed chat", s, 200, b)
			s, b = post(t, base, "/v1/completions", nil, map[string]any{"model": "sim-model", "stream": true, "max_tokens": 8,
				"prompt": fmt.Sprintf("round %d worker %d: a completion", round, w)})
			want("streamed completion", s, 200, b)
		}()
	}
	wg.Wait()

	// Prefill workers answer 503 every time: three attempts (retries), an
	// ejection, then a 5xx to the client.
	for i := range 2 {
		s, b := post(t, base, "/v1/chat/completions", map[string]string{"X-Sim-Fault": "prefill:status=503"},
			chat(fmt.Sprintf("round %d failing %d", round, i), false))
		if s < 500 {
			t.Errorf("round %d, failing request: status %d, want 5xx: %s", round, s, b)
		}
	}

	// Async: one wait-mode request (queued, dispatched, answered), one
	// enqueue-mode request fetched by id.
	s, b := post(t, base, "/v1/chat/completions", map[string]string{"x-llm-d-async-mode": "wait"},
		chat(fmt.Sprintf("round %d async wait", round), false))
	want("async wait", s, 200, b)
	id := fmt.Sprintf("promtest-%d-%d", round, time.Now().UnixNano())
	s, b = post(t, base, "/v1/chat/completions", map[string]string{"x-llm-d-async-mode": "enqueue", "x-request-id": id},
		chat(fmt.Sprintf("round %d async enqueue", round), false))
	want("async enqueue", s, 202, b)
	resp, err := celflowc.Get(base + "/v1/requests/" + id + "?wait=20")
	if err != nil {
		t.Errorf("GET /v1/requests/%s: %v", id, err)
	} else {
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		want("async result", resp.StatusCode, 200, b)
	}

	// A burst over the admission bound (4 in flight, 2 queued): slow decodes
	// hold the slots, two requests wait, the rest get 429.
	var mu sync.Mutex
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, b := post(t, base, "/v1/chat/completions", map[string]string{"X-Sim-Fault": "decode:delay=400ms"},
				chat(fmt.Sprintf("round %d burst %d", round, i), false))
			mu.Lock()
			defer mu.Unlock()
			switch s {
			case 429:
				n429++
			case 200:
			default:
				t.Errorf("round %d, burst: status %d: %s", round, s, b)
			}
		}()
	}
	wg.Wait()
	return n429
}

// checkDashboard checks every query of a dashboard and returns them with
// the failures.
func checkDashboard(ctx context.Context, k *Checker, raw []byte) ([]Query, []error) {
	qs, err := ParseDashboard(raw, Builtins(window))
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, q := range qs {
		if err := k.Check(ctx, q); err != nil {
			errs = append(errs, err)
		}
	}
	return qs, errs
}

// scrapedSince waits until Prometheus has a scrape of celflow taken after t0.
func scrapedSince(t *testing.T, c *Client, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := c.Query(ctx, `max(timestamp(celflow_build_info{job="celflow"}))`, time.Time{})
		if err == nil && len(s) == 1 && s[0].Value > float64(t0.UnixMilli())/1000 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape of celflow after %s within 30s (last: %v, %v)", t0.Format(time.RFC3339Nano), s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDashboardAndAlerts(t *testing.T) {
	start := time.Now()
	root := repoRoot()
	rulesFile := filepath.Join(root, rulesPath)

	// promtool first: it needs nothing running.
	out, err := exec.Command(binary(t, "PROMTOOL_BIN", "promtool"), "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("promtool check rules: %s", strings.TrimSpace(string(out)))
	// The rules' unit tests: synthetic series, when each alert fires and
	// what its annotations say.
	out, err = exec.Command(binary(t, "PROMTOOL_BIN", "promtool"), "test", "rules",
		filepath.Join(root, ".ci", "prometheus", "celflow-rules.test.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("promtool test rules: %s", strings.Join(strings.Fields(string(out)), " "))
	if v, err := exec.Command(binary(t, "PROMETHEUS_BIN", "prometheus"), "--version").CombinedOutput(); err == nil {
		t.Logf("%s", strings.SplitN(string(v), "\n", 2)[0])
	}

	base, metricsAddr := startCelflow(t, startRedis(t))
	celflowUp := time.Now()
	prom := startPrometheus(t, metricsAddr)
	t.Logf("stack up in %s", time.Since(start).Round(time.Millisecond))

	// Two rounds, three scrape intervals apart (see the package comment).
	n429 := load(t, base, 1)
	scrapedSince(t, prom, time.Now().Add(2*time.Second))
	n429 += load(t, base, 2)
	if n429 == 0 {
		t.Error("no request was answered 429: the admission series would show nothing")
	}
	// The async queue gauges refresh every 5 s: let one refresh land after
	// the queued requests, then wait for a scrape past it.
	if d := time.Until(celflowUp.Add(6 * time.Second)); d > 0 {
		time.Sleep(d)
	}
	scrapedSince(t, prom, time.Now().Add(1500*time.Millisecond))
	t.Logf("load done in %s (%d answered 429)", time.Since(start).Round(time.Millisecond), n429)
	if t.Failed() {
		t.FailNow()
	}

	ctx := context.Background()
	names, err := prom.MetricNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := &Checker{C: prom, Names: names, At: time.Now()}

	var all []Query // every query checked, for the mutation subtest

	t.Run("rules", func(t *testing.T) {
		raw, err := os.ReadFile(rulesFile)
		if err != nil {
			t.Fatal(err)
		}
		inFile := regexp.MustCompile(`(?m)^\s*-\s*alert:`).FindAll(raw, -1)
		doc, err := os.ReadFile(filepath.Join(root, opsDoc))
		if err != nil {
			t.Fatal(err)
		}
		anchors := Anchors(string(doc))
		// Wait for one evaluation of every rule by Prometheus.
		var rules []Rule
		deadline := time.Now().Add(15 * time.Second)
		for {
			if rules, err = prom.Rules(ctx); err != nil {
				t.Fatal(err)
			}
			evaluated := len(rules) > 0
			for _, r := range rules {
				evaluated = evaluated && !r.LastEvaluation.IsZero() && r.LastEvaluation.Year() > 1
			}
			if evaluated || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if len(rules) != len(inFile) {
			t.Errorf("Prometheus loaded %d rules, the file has %d alerts", len(rules), len(inFile))
		}
		for _, r := range rules {
			where := fmt.Sprintf("rule %s (%s)", r.Name, r.Labels["severity"])
			if r.Type != "alerting" {
				t.Errorf("%s: type %q, want alerting", where, r.Type)
			}
			if r.Health != "ok" {
				t.Errorf("%s: health %q: %s", where, r.Health, r.LastError)
			}
			if r.Duration <= 0 {
				t.Errorf("%s: no for:", where)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", where, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
			}
			if u := r.Annotations["runbook_url"]; !strings.HasPrefix(u, runbookBase) || !anchors[strings.TrimPrefix(u, runbookBase)] {
				t.Errorf("%s: runbook_url %q is not a heading of %s", where, u, opsDoc)
			}
			// The whole expression evaluates (a healthy system gives no series).
			if _, err := prom.Query(ctx, r.Query, k.At); err != nil {
				t.Errorf("%s: %v", where, err)
			}
			measure, op, th, err := SplitThreshold(r.Query)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			q := Query{Where: where + " measure", Expr: measure}
			all = append(all, q)
			if err := k.Check(ctx, q); err != nil {
				t.Error(err)
			} else {
				t.Logf("%s: measure has data (threshold %s %s)", where, op, th)
			}
		}
	})

	dashboard, err := os.ReadFile(filepath.Join(root, dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("dashboard", func(t *testing.T) {
		qs, errs := checkDashboard(ctx, k, dashboard)
		for _, err := range errs {
			t.Error(err)
		}
		if len(qs) < 20 {
			t.Errorf("only %d queries found in the dashboard", len(qs))
		}
		all = append(all, qs...)
		t.Logf("%d dashboard queries checked, %d failed", len(qs), len(errs))
	})

	// The dashboard file itself, with one series name misspelt where a
	// panel reads it, fails the same check that passed above.
	t.Run("the dashboard with a misspelt name fails", func(t *testing.T) {
		const name = `celflow_async_queue_depth{`
		bad := bytes.Replace(dashboard, []byte(name), []byte(Typo(name)), 1)
		if bytes.Equal(bad, dashboard) {
			t.Fatalf("%s not found in %s", name, dashboardPath)
		}
		_, errs := checkDashboard(ctx, k, bad)
		if len(errs) != 1 {
			t.Fatalf("%d failures, want 1: %v", len(errs), errs)
		}
		t.Logf("as expected: %v", errs[0])
	})

	// Misspell each celflow_* name in the first query that uses it: the
	// check must fail that query. A name the data check alone would miss
	// (inside a fallback branch) is caught by the name check.
	t.Run("a misspelt metric name fails the check", func(t *testing.T) {
		seen := map[string]bool{}
		for _, q := range all {
			for _, n := range Names(q.Expr) {
				if seen[n] {
					continue
				}
				seen[n] = true
				bad, ok := ReplaceName(q.Expr, n, Typo(n))
				if !ok {
					t.Fatalf("ReplaceName(%q) failed", n)
				}
				m := Query{Where: q.Where + " with " + Typo(n), Expr: bad}
				if err := k.Check(ctx, m); err == nil {
					t.Errorf("%s: the check passed a misspelt %s", m.Where, n)
				} else if k.Data(ctx, m) == nil {
					t.Logf("%s: caught by the name check only (the query still returns data)", m.Where)
				}
			}
		}
		if len(seen) < 20 {
			t.Errorf("only %d metric names mutated", len(seen))
		}
		t.Logf("%d metric names misspelt one at a time; each failed the check", len(seen))
	})
	t.Logf("total %s", time.Since(start).Round(time.Millisecond))
}
