package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/celflow/celflow/engine"
)

// The benchmark's own keys: names are identities, types are the nodes'.
var (
	benchKV = engine.NewKey[struct{}]("kv")
	benchEC = engine.NewKey[struct{}]("ec")
)

// Benchmark node types: no logging, no allocation of their own.
type benchNode struct {
	c   engine.Contract
	res engine.Result
}

func (n *benchNode) Contract() engine.Contract { return n.c }
func (n *benchNode) Run(_ context.Context, x *engine.Exec) engine.Result {
	if n.c.Responds && n.res.Err == nil {
		x.Run.Answer()
		return engine.Result{HTTPStatus: 200, Responded: true}
	}
	return n.res
}

var miss412 = &engine.Error{Kind: engine.KindUpstreamRejected, Node: "try_decode", Item: -1, Status: 412}

var benchOnce sync.Once

func registerBench() {
	benchOnce.Do(func() {
		for name, n := range map[string]*benchNode{
			"b-fetch":   {c: engine.Contract{Provides: []engine.AnyKey{engine.KeyMedia}}},
			"b-render":  {c: engine.Contract{Provides: []engine.AnyKey{engine.KeyTokens, engine.KeyFeatures}}},
			"b-cond":    {c: engine.Contract{Responds: true}, res: engine.Result{HTTPStatus: 412, Err: miss412}},
			"b-prefill": {c: engine.Contract{Provides: []engine.AnyKey{benchKV}, Needs: []engine.Need{{Key: engine.KeyTokens, Routes: []engine.Route{engine.RouteChat}}}}},
			"b-decode":  {c: engine.Contract{Responds: true, Terminal: true}},
		} {
			n := n
			engine.Register(engine.NodeType{Name: name, Build: func(*engine.BuildContext, json.RawMessage) (engine.Node, error) { return n, nil }})
		}
		engine.Register(engine.NodeType{Name: "b-encode", FanOut: true, Build: func(*engine.BuildContext, json.RawMessage) (engine.Node, error) {
			return &benchNode{c: engine.Contract{Needs: []engine.Need{{Key: engine.KeyMedia}}, Provides: []engine.AnyKey{benchEC}}}, nil
		}})
	})
}

// The E/P/D shape with every guard evaluated on the way.
const benchEPD = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: epd-bench, version: "1"}
vars: {short_prompt: 4}
nodes:
  - {id: fetch, type: b-fetch, when: 'request.format == "chat"'}
  - {id: render, type: b-render, needs: [fetch], when: 'request.format != "generate"'}
  - {id: try_decode, type: b-cond, needs: [render], when: "tokens.count >= 0 && !request.stream"}
  - id: encode
    type: b-encode
    needs: [{node: try_decode, if: "response.status == 412"}]
    when: 'request.format != "generate"'
    foreach: media
  - {id: prefill, type: b-prefill, needs: [encode], when: 'nodes.try_decode.status == "failed"'}
  - {id: decode, type: b-decode, needs: [prefill], when: "true"}
`

func loadBench(tb testing.TB) *engine.Workflow {
	registerBench()
	w, ds := engine.Load("bench.yaml", []byte(benchEPD), engine.LoadOptions{})
	if w == nil {
		tb.Fatalf("%s", ds)
	}
	return w
}

type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

var benchReq = &engine.Request{ID: "b", Route: engine.RouteChat, Header: http.Header{}, Body: []byte(`{"model":"m"}`), Model: "m"}

func walk(tb testing.TB, w *engine.Workflow, out *nopWriter) {
	rep := w.Serve(engine.NewRun(context.Background(), benchReq, out))
	if rep.Err != nil || !rep.Answered {
		tb.Fatalf("walk failed: %v", rep.Err)
	}
}

func BenchmarkCompileEPD(b *testing.B) {
	registerBench()
	data := []byte(benchEPD)
	b.ReportAllocs()
	for b.Loop() {
		if w, ds := engine.Load("bench.yaml", data, engine.LoadOptions{}); w == nil {
			b.Fatal(ds)
		}
	}
}

func BenchmarkWalkEPD(b *testing.B) {
	w := loadBench(b)
	out := &nopWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		walk(b, w, out)
	}
}

// The walk's allocation budget (issue 01 floor): not timed, counted.
func TestWalkAllocs(t *testing.T) {
	w := loadBench(t)
	out := &nopWriter{h: http.Header{}}
	walk(t, w, out)
	allocs := testing.AllocsPerRun(200, func() { walk(t, w, out) })
	t.Logf("walk of the E/P/D graph: %.0f allocs", allocs)
	if allocs > 40 {
		t.Fatalf("walk allocates %.0f times, budget 40", allocs)
	}
}

// ACCEPTANCE 50: 1,000 requests compile no CEL program and no schema.
func TestNoCompilePerRequest(t *testing.T) {
	w := loadBench(t)
	epd := load(t, `
nodes:
  - {id: fetch, type: t-fetch, when: 'request.format == "chat"'}
  - {id: render, type: t-render, needs: [fetch], params: {address: "http://r"}}
  - {id: try_decode, type: t-cond-decode, needs: [render], params: {status: 412}}
  - {id: encode, type: t-encode, foreach: media, needs: [{node: try_decode, if: "response.status == 412"}]}
  - {id: prefill, type: t-prefill, needs: [encode], retry: {attempts: 2, if: "response.status >= 500"}}
  - {id: decode, type: t-decode, needs: [prefill]}
`)
	before := engine.CompileCount()
	out := &nopWriter{h: http.Header{}}
	for range 1000 {
		walk(t, w, out)
		serve(t, epd, context.Background(), engine.RouteChat, imageChat)
	}
	if after := engine.CompileCount(); after != before {
		t.Fatalf("compiled %d times during requests", after-before)
	}
	_ = os.Getenv
}
