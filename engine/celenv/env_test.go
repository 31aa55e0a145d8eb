package celenv

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

type fakeMedia []Media

func (f fakeMedia) CELMedia(dst []Media) []Media { return append(dst, f...) }

func testEnv(t *testing.T) *Env {
	t.Helper()
	e, err := NewEnv([]string{"fetch", "try_decode", "decode"}, map[string]any{
		"short_prompt": json.Number("64"), "ratio": json.Number("0.5"), "name": "x", "on": true,
		"tiers": map[string]any{"gold": "g"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestCompileErrors(t *testing.T) {
	e := testEnv(t)
	tests := []struct {
		name, src string
		kind      Kind
		want      string // substring of the first issue; "" means it compiles
		col       int
	}{
		{"ok guard", `request.format == "chat"`, Guard, "", 0},
		// ACCEPTANCE 45
		{"type error", `response.status == "412"`, Edge, "no matching overload", 16},
		// ACCEPTANCE 46
		{"undeclared", `requets.model == "x"`, Guard, `undeclared reference to "requets" (did you mean "request"?)`, 0},
		{"field typo", `request.fromat == "chat"`, Guard, `undefined field "fromat" (did you mean "format"?)`, 7},
		{"outcome in guard", `outcome.status == "failed"`, Guard, "exist only in edge conditions", 0},
		// ACCEPTANCE 47
		{"non-bool guard", `request.model`, Guard, "must be a bool expression, got string", 0},
		{"non-list foreach", `request.model`, ForEach, "must be a list", 0},
		{"list foreach", `media`, ForEach, "", 0},
		// ACCEPTANCE 44
		{"syntax", `request.format == = "chat"`, Guard, "Syntax error", 18},
		{"unknown node", `nodes.nope.status == "succeeded"`, Guard, `undefined field "nope"`, 5},
		{"config typed", `tokens.count <= config.short_prompt && config.ratio < 1.0 && config.on`, Guard, "", 0},
		{"config type error", `config.name > 3`, Guard, "no matching overload", 12},
		{"headers", `"x-hint" in response.headers && response.headers["x-hint"] == "a"`, Edge, "", 0},
		// Issue 13: header access that cannot blow up.
		{"header lookup", `request.format == "chat" && request.headers["x-tenant"] == "gold"`, Guard,
			`request.headers["x-tenant"] fails the request (500) when the header is absent`, 43},
		{"header select", `request.headers.tenant == "gold"`, Guard, `request.headers["tenant"] fails the request`, 15},
		{"header ternary", `has(request.headers.tenant) ? request.headers.tenant == "g" : false`, Guard, "", 0},
		{"header guarded both sides", `"a" in request.headers && "b" in request.headers && request.headers["a"] == request.headers["b"]`, Guard, "", 0},
		{"header guard on the wrong side", `request.headers["a"] == "x" && "a" in request.headers`, Guard, "fails the request", 15},
		{"header computed key", `request.headers[request.model] == "x"`, Guard, "computed key", 15},
		{"header iteration", `request.headers.exists(k, k.startsWith("x-") && request.headers[k] == "1")`, Guard, "", 0},
		{"header optional", `request.headers[?"x-tenant"].orValue("") == "gold"`, Guard, "", 0},
		{"header capitals", `request.headers[?"X-Tenant"].orValue("") == "gold"`, Guard, `header name "X-Tenant" has capitals`, 17},
		{"header capitals in", `"X-Tenant" in request.headers`, Guard, `header name "X-Tenant" has capitals`, 0},
		{"outcome word", `outcome.status == "failure"`, Edge, `"failure" is not an outcome status (did you mean "failed"?); the outcome words are pending`, 18},
		{"outcome word in list", `nodes.fetch.status in ["succeeded", "skiped"]`, Guard, `"skiped" is not an outcome status (did you mean "skipped"?)`, 36},
		{"http status", `response.status == 999`, Edge, "999 is not an HTTP status", 19},
		{"http status reversed", `42 < nodes.try_decode.response.status`, Guard, "42 is not an HTTP status", 0},
		{"http status 0", `response.status == 0`, Edge, "", 0},
		{"no outputs", `nodes.fetch.outputs.token_count > 1024`, Guard, `node "fetch" (type ) has no output "token_count"; its type declares no outputs`, 19},
		{"dyn guard", `config.tiers["gold"]`, Guard, "must be a bool, but its type is only known at run time (dyn)", 0},
		{"duration", `nodes.fetch.duration < duration("1s")`, Guard, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, iss := e.Compile(tc.src, tc.kind)
			if tc.want == "" {
				if len(iss) > 0 || x == nil {
					t.Fatalf("unexpected issues: %+v", iss)
				}
				return
			}
			if len(iss) == 0 {
				t.Fatalf("compiled, want error %q", tc.want)
			}
			if !strings.Contains(iss[0].Msg, tc.want) {
				t.Fatalf("got %q, want %q", iss[0].Msg, tc.want)
			}
			if iss[0].Col != tc.col {
				t.Fatalf("col %d, want %d (%s)", iss[0].Col, tc.col, iss[0].Msg)
			}
		})
	}
}

func TestEval(t *testing.T) {
	e := testEnv(t)
	a := e.NewActivation(3)
	a.Request = Request{Format: "chat", Model: "m", Header: http.Header{"X-Tenant": {"a", "b"}}}
	a.Tokens = Tokens{Known: true, Count: 10}
	a.Media = fakeMedia{{Index: 0, Modality: "image", Type: "image/png"}, {Index: 1, Modality: "audio"}}
	a.Nodes.States[1] = NodeState{Status: "failed", Duration: 2 * time.Second}
	a.Nodes.States[1].Response.Set(412, http.Header{"X-Hint": {"p1"}})
	a.Outcome = &a.Nodes.States[1]
	tests := []struct {
		src  string
		kind Kind
		want bool
	}{
		{`request.format == "chat" && request.headers[?"x-tenant"].orValue("") == "a"`, Guard, true},
		{`request.headers[?"x-absent"].orValue("") == ""`, Guard, true},
		{`"x-tenant" in request.headers && request.headers["x-tenant"] == "a"`, Guard, true},
		{`tokens.known && tokens.count <= config.short_prompt`, Guard, true},
		{`media.exists(m, m.modality == "audio")`, Guard, true},
		{`media.size() == 2 && media[0].type == "image/png"`, Guard, true},
		{`nodes.try_decode.response.status == 412 && nodes.try_decode.duration > duration("1s")`, Guard, true},
		{`response.status == 412 && outcome.status == "failed" && response.headers[?"x-hint"].orValue("") == "p1"`, Edge, true},
		{`nodes.decode.status == "succeeded"`, Guard, false},
	}
	for _, tc := range tests {
		x, iss := e.Compile(tc.src, tc.kind)
		if iss != nil {
			t.Fatalf("%s: %+v", tc.src, iss)
		}
		got, err := x.Bool(a)
		if err != nil || got != tc.want {
			t.Errorf("%s = %v, %v; want %v", tc.src, got, err, tc.want)
		}
	}
	// ACCEPTANCE 49: a missing key is an evaluation error, not false.
	x, _ := e.Compile(`config.tiers["missing"] == "a"`, Guard)
	if _, err := x.Bool(a); err == nil {
		t.Fatal("missing key evaluated without error")
	}
	l, _ := e.Compile(`media.filter(m, m.modality == "image")`, ForEach)
	lst, err := l.List(a)
	if err != nil || lst.Size().Value().(int64) != 1 {
		t.Fatalf("filter: %v %v", lst, err)
	}
}

func TestAnalysis(t *testing.T) {
	e := testEnv(t)
	x, _ := e.Compile(`nodes.fetch.status == "succeeded" && media.size() > 0 && nodes.try_decode.attempt > 0`, Guard)
	if len(x.NodeReads) != 2 || x.NodeReads[0].Name != "fetch" || x.NodeReads[1].Name != "try_decode" || !x.ReadsMedia {
		t.Fatalf("reads %+v media %v", x.NodeReads, x.ReadsMedia)
	}
	if x.NodeReads[1].Col != 57 {
		t.Fatalf("col %d", x.NodeReads[1].Col)
	}
	routes := []struct {
		src  string
		want [3]Tri // chat, completions, generate
	}{
		{`request.format == "chat"`, [3]Tri{True, False, False}},
		{`request.format != "generate"`, [3]Tri{True, True, False}},
		{`request.format in ["chat", "completions"] && tokens.known`, [3]Tri{Unknown, Unknown, False}},
		{`!(request.format == "chat") || tokens.known`, [3]Tri{Unknown, True, True}},
		{`true`, [3]Tri{True, True, True}},
	}
	for _, r := range routes {
		x, iss := e.Compile(r.src, Guard)
		if iss != nil {
			t.Fatal(iss)
		}
		for i, f := range []string{"chat", "completions", "generate"} {
			if got := x.OnRoute(f); got != r.want[i] {
				t.Errorf("%s on %s = %v, want %v", r.src, f, got, r.want[i])
			}
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"requets", "request", 1}, {"", "abc", 3}, {"media", "media", 0}, {"tokens", "token", 1}} {
		if got := Distance(tc.a, tc.b); got != tc.d {
			t.Errorf("Distance(%q,%q)=%d want %d", tc.a, tc.b, got, tc.d)
		}
	}
}

func BenchmarkGuard(b *testing.B) {
	e, _ := NewEnv([]string{"a"}, nil)
	x, _ := e.Compile(`request.format == "chat" && !request.stream`, Guard)
	a := e.NewActivation(1)
	a.Request.Format = "chat"
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := x.Bool(a); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
