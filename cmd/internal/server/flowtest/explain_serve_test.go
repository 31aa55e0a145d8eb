package flowtest_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/schema"
	"github.com/celflow/celflow/workflows"
)

// Issue 18, explain and tests are the serve path: a property test. Seeded
// generated workflows (the shipped P/D shapes' nodes with random guards,
// edges, joins, retries, target rules and CEL error policies) and requests
// (chat, completions and generate, models, headers, streaming) run through serve — the real front,
// the real node types, a celflow sim in direct mode answering the
// statuses the case assumes (X-Sim-Fault per role; the conditional-decode
// probe's hit or miss by its cache_hit_threshold, 0 always hits and 1
// always misses a prompt shorter than a block) — and through explain's own
// code (Workflow.Explain over the front's entry, with those statuses as its
// assumptions). Every node's outcome (succeeded, failed, timed out,
// skipped, omitted, cancelled), the node that answered and the client's
// status must agree. The count is bounded (CELFLOW_PROPERTY_CASES,
// default 500) and so is the time (60 s: the cases run so far count).
func TestExplainAgreesWithServe(t *testing.T) {
	// Direct mode: the probe's leg reaches the worker, whose threshold
	// decides (a gateway would answer a cold prefix 412 itself).
	worker := startSim(t, "--roles", "render,prefill,decode", "--name", "w0")
	up, err := upstream.New(upstream.Config{Mode: "direct", Render: worker, Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RolePrefill: {{URL: worker}}, upstream.RoleDecode: {{URL: worker}}, "decode-small": {{URL: worker}}}})
	if err != nil {
		t.Fatal(err)
	}
	cases := 500
	if v := os.Getenv("CELFLOW_PROPERTY_CASES"); v != "" {
		fmt.Sscan(v, &cases)
	}
	rng := rand.New(rand.NewPCG(18, 2026))
	deadline := time.Now().Add(60 * time.Second)
	ran := 0
	for i := 0; i < cases && time.Now().Before(deadline); i++ {
		ran++
		g := genCase(rng)
		g.req.prompt = fmt.Sprintf("hello there %d", i) // never cached: a probe with threshold 1 misses
		checkCase(t, i, g, up)
		if t.Failed() {
			return // the first disagreement, with its case, is the report
		}
	}
	// The shipped workflows that run on these roles, with requests of each
	// kind and every role status.
	for _, name := range []string{"pd.yaml", "cd-pd.yaml", "pd-aggregated.yaml", "pd-routed.yaml", "decode-only.yaml"} {
		data, err := workflows.FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []roleStatuses{{}, {prefill: 503}, {decode: 503}, {prefill: 400}, {decode: 400}} {
			for _, rq := range []genRequest{
				{route: engine.RouteChat, model: "m"},
				{route: engine.RouteCompletions, model: "m-small", stream: true},
			} {
				ran++
				rq.prompt = fmt.Sprintf("a story %d", ran) // never cached: the probe misses
				checkCase(t, ran, genCaseT{yaml: string(data), st: st, req: rq, shipped: name, predicted: true}, up)
				if t.Failed() {
					return
				}
			}
		}
	}
	t.Logf("%d cases agreed", ran)
}

// roleStatuses are the statuses the sim answers per role (0: it serves).
type roleStatuses struct{ prefill, decode int }

type genRequest struct {
	route        engine.Route
	model        string
	prompt       string
	stream       bool
	tier, number string // x-tier and x-n headers, "" for none
	reqID        string // x-request-id, "" for none (a malformed one is dropped by both)
}

// genCaseT is one generated case: a workflow, the sim's statuses and a request.
type genCaseT struct {
	yaml     string
	st       roleStatuses
	req      genRequest
	probeHit bool   // the probe's threshold is 0 (a hit), else 1 (a miss)
	shipped  string // the shipped workflow's name, "" for a generated one
	// predicted: the probe predicts (no mode: worker, the shipped ones); in
	// direct mode it predicts a miss of a prompt shorter than a block (or
	// of one no render tokenized), 412, calling no one.
	predicted bool
}

// The guards, edge conditions and target conditions the generator draws
// from: request fields, headers present and absent, vars, a CEL error (an
// int() of a header that may be absent or malformed).
var (
	genGuards = []string{
		`request.model == config.big`,
		`request.model != config.big`,
		`request.format == "chat"`,
		`request.format != "chat"`,
		`"x-tier" in request.headers`,
		`request.headers[?"x-tier"].orValue("") == "gold"`,
		`request.stream`,
		`!request.stream`,
		`size(media) == 0`,
		`request.id != ""`,
		`int(request.headers[?"x-n"].orValue("x")) > 1`,
		`request.path == "/v1/completions"`,
		`"host" in request.headers`,
		`request.headers[?"user-agent"].orValue("") == "celflow-property"`,
		`size(request.id) == 36`,
		`request.id == "req-7"`,
		`"x-request-id" in request.headers`,
	}
	genProbeEdges = []string{
		`response.status == 412`,
		`response.status >= 400`,
		`outcome.status == "failed"`,
		`response.status == 412 || request.model == config.big`,
		`response.status == 412 && int(request.headers[?"x-n"].orValue("x")) > 1`,
	}
	genFallbackEdges = []string{
		`response.status >= 500`,
		`response.status == 503`,
		`outcome.status == "failed" && response.status != 412`,
	}
)

func genCase(rng *rand.Rand) genCaseT {
	pick := func(l []string) string { return l[rng.IntN(len(l))] }
	var b strings.Builder
	b.WriteString("apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: gen, version: \"1\"}\nroutes: [chat, completions, generate]\n")
	policy := []string{"safe", "fail"}[rng.IntN(2)]
	fmt.Fprintf(&b, "defaults: {kv_connector: kv-nixl, on_cel_error: %s}\nvars: {big: m-big}\nnodes:\n", policy)
	g := genCaseT{probeHit: rng.IntN(2) == 0}
	probe := rng.IntN(3) > 0
	prefill := rng.IntN(4) > 0
	if probe {
		thr := 1
		if g.probeHit {
			thr = 0
		}
		fmt.Fprintf(&b, "  - id: probe\n    type: conditional-decode\n    params: {mode: worker, cache_hit_threshold: %d}\n", thr)
		if rng.IntN(3) == 0 {
			fmt.Fprintf(&b, "    when: '%s'\n", pick(genGuards))
		}
	}
	if prefill {
		b.WriteString("  - id: prefill\n    type: prefill\n")
		if probe {
			fmt.Fprintf(&b, "    needs: [{node: probe, if: '%s'}]\n", pick(genProbeEdges))
		}
		if rng.IntN(3) == 0 {
			fmt.Fprintf(&b, "    when: '%s'\n", pick(genGuards))
		}
		if rng.IntN(3) == 0 {
			b.WriteString("    retry: {attempts: 2, backoff: 1ms}\n")
		}
		if rng.IntN(3) == 0 {
			fmt.Fprintf(&b, "    target:\n      - {if: '%s', headers: {x-rule: p}}\n", pick(genGuards))
		}
	}
	b.WriteString("  - id: decode\n    type: decode\n")
	var needs []string
	switch {
	case prefill:
		needs = append(needs, "prefill")
	case probe:
		needs = append(needs, fmt.Sprintf("{node: probe, if: '%s'}", pick(genProbeEdges)))
	}
	if probe && prefill && rng.IntN(2) == 0 {
		needs = append(needs, fmt.Sprintf("{node: probe, if: '%s'}", pick(genFallbackEdges)))
		b.WriteString("    join: any\n")
	}
	if len(needs) > 0 {
		fmt.Fprintf(&b, "    needs: [%s]\n", strings.Join(needs, ", "))
	}
	if rng.IntN(3) == 0 {
		fmt.Fprintf(&b, "    target:\n      - {if: '%s', headers: {x-rule: d}}\n", pick(genGuards))
	}
	g.yaml = b.String()
	statuses := []int{0, 0, 503, 400}
	g.st = roleStatuses{prefill: statuses[rng.IntN(len(statuses))], decode: statuses[rng.IntN(len(statuses))]}
	g.req = genRequest{
		route:  []engine.Route{engine.RouteChat, engine.RouteCompletions, engine.RouteGenerate}[rng.IntN(3)],
		model:  []string{"m", "m-big"}[rng.IntN(2)],
		stream: rng.IntN(3) == 0,
		tier:   []string{"", "gold", "silver"}[rng.IntN(3)],
		number: []string{"", "2", "0", "two"}[rng.IntN(4)],
		reqID:  []string{"", "", "req-7", "bad id!"}[rng.IntN(4)],
	}
	return g
}

// body is the request's client body on its route.
func (r genRequest) body() string {
	s := fmt.Sprintf(`"model":%q,"max_tokens":2,"stream":%v`, r.model, r.stream)
	switch r.route {
	case engine.RouteChat:
		return fmt.Sprintf(`{%s,"messages":[{"role":"user","content":%q}]}`, s, r.prompt)
	case engine.RouteGenerate:
		// The prompt's length in ids, each its own: shorter than a block.
		ids := make([]string, 0, 8)
		for i, c := range r.prompt {
			if len(ids) < 8 {
				ids = append(ids, fmt.Sprint(int(c)+i))
			}
		}
		return fmt.Sprintf(`{%s,"token_ids":[%s]}`, s, strings.Join(ids, ","))
	}
	return fmt.Sprintf(`{%s,"prompt":%q}`, s, r.prompt)
}

// headers are the request's client headers, as both paths get them.
func (r genRequest) headers(st roleStatuses) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	// Set, so that the client's transport adds none of its own.
	h.Set("User-Agent", "celflow-property")
	h.Set("Accept-Encoding", "identity")
	if r.reqID != "" {
		h.Set("X-Request-Id", r.reqID)
	}
	if r.tier != "" {
		h.Set("X-Tier", r.tier)
	}
	if r.number != "" {
		h.Set("X-N", r.number)
	}
	var faults []string
	if st.prefill != 0 {
		faults = append(faults, fmt.Sprintf("prefill:status=%d", st.prefill))
	}
	if st.decode != 0 {
		faults = append(faults, fmt.Sprintf("decode:status=%d", st.decode))
	}
	if len(faults) > 0 {
		h.Set("X-Sim-Fault", strings.Join(faults, ";"))
	}
	return h
}

// assumptions are the sim's statuses as explain's --assume: the probe is
// on the decode role (its fault's status, else its hit or miss).
func (g genCaseT) assumptions(w *engine.Workflow) map[string]engine.Assumption {
	a := map[string]engine.Assumption{}
	for _, n := range w.Nodes() {
		switch {
		case n.Type == "conditional-decode" && (g.predicted || g.req.route == engine.RouteGenerate):
			// Predicted (worker mode has no threshold on generate): a
			// prompt shorter than a block is a miss, without a call.
			a[n.ID] = engine.Assumption{HTTP: 412}
		case n.Type == "prefill" && g.st.prefill != 0:
			a[n.ID] = engine.Assumption{HTTP: g.st.prefill}
		case (n.Type == "decode" || n.Type == "conditional-decode") && g.st.decode != 0:
			a[n.ID] = engine.Assumption{HTTP: g.st.decode}
		case n.Type == "conditional-decode" && !g.probeHit:
			a[n.ID] = engine.Assumption{HTTP: 412}
		case n.Type == "conditional-decode":
			a[n.ID] = engine.Assumption{HTTP: 200}
		}
	}
	return a
}

// outcomeLine is what both paths must agree on: every node's status, the
// node that answered and the client's status.
func outcomeLine(rep *engine.Report, status int) string {
	var parts []string
	answered := ""
	for _, o := range rep.Outcomes {
		parts = append(parts, o.Node+"="+o.Status.String())
		if o.Responded {
			answered = o.Node
		}
	}
	sort.Strings(parts)
	return fmt.Sprintf("%s; answered by %q; HTTP %d", strings.Join(parts, " "), answered, status)
}

// explainStatus is the status explain says the client gets (as the tests:
// block reads it).
func explainStatus(rep *engine.Report) int {
	switch {
	case rep.Err != nil && !rep.Answered:
		return rep.Err.HTTPStatus()
	case rep.Answered:
		for _, o := range rep.Outcomes {
			if o.Responded && o.HTTPStatus != 0 {
				return o.HTTPStatus
			}
		}
	}
	return 200
}

func checkCase(t *testing.T, i int, g genCaseT, up *upstream.Client) {
	t.Helper()
	name := g.shipped
	if name == "" {
		name = fmt.Sprintf("case %d", i)
	}
	describe := func() string {
		return fmt.Sprintf("%s: %s %s headers %v\n%s", name, g.req.route.Path(), g.req.body(), g.req.headers(g.st), g.yaml)
	}
	// Both paths load the same bytes the same way serve does (the front's
	// entry for explain).
	w, ds := engine.Load(name, []byte(g.yaml), engine.LoadOptions{Upstream: up, Entry: front.Entry})
	if w == nil {
		// The generator writes expressions that fail for some requests on
		// purpose (the run-time policy is part of what must agree). The load's
		// counterexample search refuses them as cel/may-fail; accept each one
		// as an author would, with allow:, and load again.
		if allowed, ok := allowMayFail(g.yaml, ds); ok {
			g.yaml = allowed
			w, ds = engine.Load(name, []byte(g.yaml), engine.LoadOptions{Upstream: up, Entry: front.Entry})
		}
	}
	if w == nil {
		t.Fatalf("%s does not load:\n%s\n%s", name, ds, g.yaml)
	}
	defer w.Close()
	if !w.Serves(g.req.route) {
		return
	}
	reports := make(chan *engine.Report, 1)
	log := logrus.New()
	log.SetOutput(io.Discard)
	srv := front.New(front.Options{Runners: map[engine.Route]engine.Runner{g.req.route: w}, Log: log,
		Observe: func(ob *front.Observation) {
			if ob.Report != nil {
				reports <- ob.Report
			}
		}})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	// explain gets the headers as they go on the wire, Host and
	// Content-Length included (the server takes those apart; explain's
	// entry must too).
	wire := g.req.headers(g.st)
	wire.Set("Host", strings.TrimPrefix(ts.URL, "http://"))
	wire.Set("Content-Length", fmt.Sprint(len(g.req.body())))
	rep, err := w.Explain(context.Background(), engine.Probe{Route: g.req.route, Body: []byte(g.req.body()), Headers: wire}, g.assumptions(w))
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, describe())
	}
	want := outcomeLine(rep, explainStatus(rep))
	req, err := http.NewRequest(http.MethodPost, ts.URL+g.req.route.Path(), strings.NewReader(g.req.body()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = g.req.headers(g.st)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("serve: %v\n%s", err, describe())
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var served *engine.Report
	select {
	case served = <-reports:
	case <-time.After(10 * time.Second):
		t.Fatalf("serve reported no run (HTTP %d)\n%s", resp.StatusCode, describe())
	}
	if got := outcomeLine(served, resp.StatusCode); got != want {
		t.Fatalf("explain and serve disagree\nserve:   %s\nexplain: %s\n%s\nserve's run:\n%s\nexplain says:\n%s", got, want, describe(), engine.FormatReport(served), engine.FormatReport(rep))
	}
}

// allowMayFail appends an allow: entry for every cel/may-fail finding of ds
// to the workflow text; ok is false when ds has another error (the case
// really does not load).
func allowMayFail(yaml string, ds schema.Diagnostics) (string, bool) {
	var b strings.Builder
	b.WriteString(yaml)
	if !strings.HasSuffix(yaml, "\n") {
		b.WriteString("\n")
	}
	b.WriteString("allow:\n")
	n := 0
	for _, d := range ds {
		if d.Severity != schema.Error {
			continue
		}
		if d.Rule != "cel/may-fail" {
			return "", false
		}
		fmt.Fprintf(&b, "  - {rule: cel/may-fail, at: %q, why: the property test fails it on purpose}\n", d.Path)
		n++
	}
	return b.String(), n > 0
}
