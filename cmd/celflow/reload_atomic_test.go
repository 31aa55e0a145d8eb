package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/async/redistest"
)

// atomicConfig is a serve config with async on Redis at redisURL, the
// workflow in wf.yaml, and the given body cap (MiB), in-flight bound and
// gateway.
func atomicConfig(gw, redisURL string, bodyMiB, maxInFlight int) string {
	return fmt.Sprintf(`server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 2s, max_request_body_size: %d}
upstream: {gateway: "%s"}
admission: {max_in_flight: %d}
async: {redis_url: "%s", poll_interval: 50ms}
workflow: wf.yaml
`, bodyMiB, gw, maxInFlight, redisURL)
}

// atomicWorkflow is an async broker scoping by tenantHeader, then decode,
// serving routes.
func atomicWorkflow(name, tenantHeader, routes string) string {
	return `apiVersion: celflow/v1
kind: Workflow
metadata: {name: ` + name + `, version: "1"}
routes: [` + routes + `]
nodes:
  - id: async
    type: async-broker
    params: {tenant_header: ` + tenantHeader + `}
  - id: decode
    type: decode
    needs: [{node: async, if: outcome.status == "succeeded"}]
`
}

// observed is everything a client and a scraper can see of a generation.
type observed struct {
	Routes   map[string]string // "POST path" → "status body"
	BigBody  int               // status of a 1.5 MiB chat body
	Scope    map[string]int    // GET /v1/requests/async-1 status by tenant header sent
	Metrics  []string          // build info, admission bounds, endpoint gauges
	Workflow string            // the workflow label a chat request is counted under
}

// observe reads every observable of the live generation; the async request
// async-1 (tenant t1) must be finished already, so nothing changes behind.
func observe(t *testing.T, addr string) observed {
	t.Helper()
	o := observed{Routes: map[string]string{}, Scope: map[string]int{}}
	before := chatCounts(t, addr)
	for _, p := range []string{"/v1/chat/completions", "/v1/completions", "/inference/v1/generate"} {
		req, _ := http.NewRequest("POST", "http://"+addr+p,
			strings.NewReader(`{"model":"m","prompt":"hi","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", "observe")
		code, body := do(t, req)
		o.Routes["POST "+p] = strconv.Itoa(code) + " " + body
	}
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"pad":"`+strings.Repeat("x", 3<<19)+`"}`))
	o.BigBody, _ = do(t, req)
	for _, h := range []string{"x-tenant-a", "x-tenant-b"} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/requests/async-1", nil)
		req.Header.Set(h, "t1")
		o.Scope[h], _ = do(t, req)
	}
	after := chatCounts(t, addr)
	for wf, n := range after {
		if n > before[wf] {
			o.Workflow = wf
		}
	}
	o.Metrics = scrape(t, addr, "celflow_build_info", "celflow_admission_max_in_flight", "celflow_admission_limit", "celflow_endpoints")
	return o
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrape returns the /metrics lines that start with one of the prefixes.
func scrape(t *testing.T, addr string, prefixes ...string) []string {
	t.Helper()
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		for _, p := range prefixes {
			if strings.HasPrefix(sc.Text(), p) {
				out = append(out, sc.Text())
			}
		}
	}
	sort.Strings(out)
	return out
}

// chatCounts maps workflow label → 200s counted on the chat route.
func chatCounts(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	const pre = `celflow_requests_total{code="200",route="/v1/chat/completions",workflow="`
	for _, ln := range scrape(t, addr, pre) {
		rest := strings.TrimPrefix(ln, pre)
		wf, v, _ := strings.Cut(rest, `"} `)
		f, _ := strconv.ParseFloat(v, 64)
		out[wf] = f
	}
	return out
}

// Issue: a rejected reload changed live behaviour (the async-broker node
// stored its header names in a process-wide runtime while building, so a
// workflow refused later in the same load had already changed which tenant
// header scopes GET /v1/requests/{id}). Now a reload builds the whole
// generation first: every rejected edit below changes everything at once
// (routes, body cap, admission bound, gateway, workflow name, tenant
// header) together with one error, and nothing observable moves; the same
// edit without the error then changes all of it.
func TestServeReloadRejectedChangesNothing(t *testing.T) {
	rs := redistest.Start(t)
	gwA, gwB := gateway(t, "a"), gateway(t, "b")
	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", atomicWorkflow("alpha", "x-tenant-a", "chat"))
	cfgPath := writeFile(t, dir, "serve.yaml", atomicConfig(gwA.URL, rs.URL(), 2, 5))

	hup := make(chan os.Signal, 1)
	addr, logs := startServeHUP(t, cfgPath, noEnv, hup)

	// One queued request of tenant t1, run to its end by the dispatcher.
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "async-1")
	req.Header.Set("x-llm-d-async-mode", "enqueue")
	req.Header.Set("x-tenant-a", "t1")
	if code, body := do(t, req); code != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	for i := 0; ; i++ {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/requests/async-1", nil)
		req.Header.Set("x-tenant-a", "t1")
		if code, _ := do(t, req); code == http.StatusOK {
			break
		}
		if i == 500 {
			t.Fatalf("the queued request never finished:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}

	before := observe(t, addr)
	want := observed{
		Routes: map[string]string{
			"POST /v1/chat/completions": `200 {"gw":"a"}`,
		},
		BigBody:  http.StatusOK, // within 2 MiB: the gateway answers
		Scope:    map[string]int{"x-tenant-a": http.StatusOK, "x-tenant-b": http.StatusGone},
		Workflow: "alpha",
	}
	if before.Routes["POST /v1/chat/completions"] != want.Routes["POST /v1/chat/completions"] ||
		!strings.HasPrefix(before.Routes["POST /v1/completions"], "404 ") ||
		before.BigBody != want.BigBody || !reflect.DeepEqual(before.Scope, want.Scope) || before.Workflow != want.Workflow ||
		!contains(before.Metrics, "celflow_admission_max_in_flight 5") {
		t.Fatalf("before any reload: %+v", before)
	}

	good := atomicConfig(gwB.URL, rs.URL(), 1, 7)
	goodWF := atomicWorkflow("beta", "x-tenant-b", "chat, completions")
	rejected := []struct{ name, cfg, wf string }{
		// The async broker builds (it is first), then a later node does not.
		{"a node after the async broker", good, goodWF + "  - id: more\n    type: decode-typo\n"},
		{"a graph error after every node built", good, strings.Replace(goodWF, "node: async,", "node: nope,", 1)},
		{"upstream", strings.Replace(good, gwB.URL, "ftp://gw", 1), goodWF},
		{"config", good + "lisen: x\n", goodWF},
	}
	for i, tc := range rejected {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, dir, "serve.yaml", tc.cfg)
			writeFile(t, dir, "wf.yaml", tc.wf)
			hup <- syscall.SIGHUP
			waitMetric(t, addr, reloadsFail, float64(i+1), logs)
			if got := observe(t, addr); !reflect.DeepEqual(got, before) {
				t.Errorf("a rejected reload changed what serves:\n got %+v\nwant %+v", got, before)
			}
		})
	}

	writeFile(t, dir, "serve.yaml", good)
	writeFile(t, dir, "wf.yaml", goodWF)
	hup <- syscall.SIGHUP
	waitMetric(t, addr, reloadsOK, 1, logs)
	after := observe(t, addr)
	if after.Routes["POST /v1/chat/completions"] != `200 {"gw":"b"}` ||
		after.Routes["POST /v1/completions"] != `200 {"gw":"b"}` ||
		after.BigBody != http.StatusRequestEntityTooLarge ||
		!reflect.DeepEqual(after.Scope, map[string]int{"x-tenant-a": http.StatusGone, "x-tenant-b": http.StatusOK}) ||
		after.Workflow != "beta" || !contains(after.Metrics, "celflow_admission_max_in_flight 7") {
		t.Errorf("the valid reload did not apply everything: %+v", after)
	}
	if !reflect.DeepEqual(scrape(t, addr, "celflow_build_info"), scrape(t, addr, "celflow_build_info")) ||
		len(scrape(t, addr, "celflow_build_info")) != 1 {
		t.Errorf("build info: %v", scrape(t, addr, "celflow_build_info"))
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}
