package celenv

import (
	"cel.dev/cel-go/cel"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Every program has a checked cost estimate at load, over the limit is a
// load error, and programs whose cost grows with request data carry a
// runtime limit (issue 13).
func TestCost(t *testing.T) {
	e := testEnv(t)
	tests := []struct {
		src     string
		limited bool
		err     string
	}{
		{`request.format == "chat" && !request.stream`, false, ""},
		{`request.headers[?"x-tenant"].orValue("") == "gold"`, false, ""},
		{`nodes.fetch.status == "succeeded" && tokens.count > config.short_prompt`, false, ""},
		{`media.exists(m, m.modality == "audio")`, true, ""},
		{`media.exists(m, media.exists(n, m.hash == n.hash && m.index != n.index))`, true, ""},
		{`request.headers.exists(k, request.headers.exists(j, k == j))`, true, ""},
		{`"x-tenant" in request.headers && request.headers["x-tenant"].matches("^g.*")`, false, ""},
		{`media.all(a, media.all(b, media.all(c, a.hash + b.hash + c.hash != "")))`, false,
			"exceeds the limit of 1000000 (assuming at most 64 media items, 128 headers of 8192 bytes"},
	}
	for _, tc := range tests {
		x, iss := e.Compile(tc.src, Guard)
		if tc.err != "" {
			if len(iss) != 1 || iss[0].Rule != "cel/cost-limit" || !strings.Contains(iss[0].Msg, tc.err) {
				t.Errorf("%s: %+v", tc.src, iss)
			}
			continue
		}
		if x == nil {
			t.Fatalf("%s: %+v", tc.src, iss)
		}
		if x.CostMax == 0 || x.CostMax > CostLimit || x.CostLimited != tc.limited {
			t.Errorf("%s: estimate %d limited %v, want limited %v", tc.src, x.CostMax, x.CostLimited, tc.limited)
		}
	}
}

// Request data beyond the estimate's bounds stops at the runtime limit
// with a clear error instead of running unbounded.
func TestCostRuntimeLimit(t *testing.T) {
	e := testEnv(t)
	x, iss := e.Compile(`request.headers.exists(k, request.headers.exists(j, k + j == "-"))`, Guard)
	if iss != nil {
		t.Fatal(iss)
	}
	a := e.NewActivation(3)
	h := http.Header{}
	for i := range 2000 {
		h.Set("x-h"+strconv.Itoa(i), "v")
	}
	a.Request = Request{Format: "chat", Header: h}
	_, err := x.Bool(a)
	if err == nil || !strings.Contains(err.Error(), "exceeded the CEL cost limit of 1000000") {
		t.Fatalf("err %v", err)
	}
	a = e.NewActivation(3)
	a.Request = Request{Format: "chat", Header: http.Header{"A": {"1"}}}
	if ok, err := x.Bool(a); ok || err != nil {
		t.Fatalf("small request: %v %v", ok, err)
	}
}

// The guard benchmark with the runtime limit forced on, for the cost
// comparison in docs/workflow-reference.md#cost.
func BenchmarkGuardCostLimited(b *testing.B) {
	e, _ := NewEnv([]string{"a"}, nil)
	x, _ := e.compileForced(`request.format == "chat" && !request.stream`)
	a := e.NewActivation(1)
	a.Request.Format = "chat"
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := x.Bool(a); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// compileForced compiles a guard with the runtime cost limit on whatever
// its estimate (benchmarks only).
func (e *Env) compileForced(src string) (*Expr, error) {
	ast, iss := e.guard.Compile(src)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	prg, err := e.guard.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(CostLimit))
	if err != nil {
		return nil, err
	}
	return &Expr{Src: src, Kind: Guard, prog: prg, CostLimited: true}, nil
}
