package engine_test

import (
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

// Expressions that test before they read never fail: the search must not
// report them (each with a guard, an edge and a foreach around it).
func TestSearchNoFalseFinding(t *testing.T) {
	for _, when := range []string{
		`size(media) > 0 && media[0].size > 10`,
		`size(media) > 0 ? 100 / size(media) > 1 : false`,
		`tokens.count / (size(media) + 1) > 1`,
		`"x-n" in request.headers && request.headers["x-n"] == "1"`,
		`request.headers[?"x-n"].orValue("") == "a"`,
		`request.headers[?"x-n"].orValue("").matches("^[0-9]+$") && int(request.headers[?"x-n"].orValue("0")) > 2`,
		`size(request.headers[?"x-tags"].orValue("").split(",")) > 2 && request.headers[?"x-tags"].orValue("").split(",")[2] == "a"`,
		`request.headers[?"x-tenant"].hasValue() && request.headers[?"x-tenant"].value() == "gold"`,
	} {
		t.Run(when, func(t *testing.T) {
			w, ds := engine.Load("t.yaml", []byte(head+"routes: [chat]\nnodes:\n  - {id: fetch, type: t-fetch}\n  - id: gate\n    type: t-fetch\n    needs: [fetch]\n    when: '"+when+"'\n  - {id: decode, type: t-decode, needs: [gate]}\n"), engine.LoadOptions{})
			if w == nil || strings.Contains(ds.String(), "cel/may-fail") {
				t.Fatalf("%s", ds)
			}
		})
	}
}

// A node's edge condition is tried only where the node runs: its guard
// proves media is there.
func TestSearchRespectsGuard(t *testing.T) {
	w, ds := engine.Load("t.yaml", []byte(head+`routes: [chat]
nodes:
  - {id: fetch, type: t-fetch}
  - {id: probe, type: t-cond-decode, needs: [fetch], when: 'size(media) > 0'}
  - {id: decode, type: t-decode, needs: [{node: probe, if: 'response.status == 412 && media[0].size > 1'}]}
`), engine.LoadOptions{})
	if w == nil || strings.Contains(ds.String(), "cel/may-fail") {
		t.Fatalf("%s", ds)
	}
}

// An edge out of a responder is evaluated only when it did not answer
// (a failure): the 200 of a hit is never seen there.
func TestSearchResponderEdge(t *testing.T) {
	w, ds := engine.Load("t.yaml", []byte(head+`routes: [chat]
nodes:
  - {id: probe, type: t-cond-decode}
  - {id: decode, type: t-decode, needs: [{node: probe, if: 'response.status != 200 || 1 / 0 == 1'}]}
`), engine.LoadOptions{})
	if w == nil || strings.Contains(ds.String(), "cel/may-fail") {
		t.Fatalf("%s", ds)
	}
}

// A request id the entry draws is fixed in the search's report, so the
// same file gives the same text on every load.
func TestSearchDeterministicID(t *testing.T) {
	doc := []byte(head + `routes: [chat]
vars: {m: {a: 1}}
nodes:
  - {id: gate, type: t-fetch, when: 'config.m[request.id] > 0'}
  - {id: decode, type: t-decode, needs: [gate]}
`)
	_, a := engine.Load("t.yaml", doc, engine.LoadOptions{})
	_, b := engine.Load("t.yaml", doc, engine.LoadOptions{})
	if !strings.Contains(a.String(), "no such key: 00000000-0000-4000-8000-000000000000") || a.String() != b.String() {
		t.Fatalf("%s\n%s", a, b)
	}
}

// A var lookup the expression guards itself is no finding; an unguarded
// one is (vars/invalid-use).
func TestVarUseGuarded(t *testing.T) {
	for _, tc := range []struct {
		when string
		bad  bool
	}{
		{`has(config.m.k) && config.m.k > 1`, false},
		{`"k" in config.m && config.m["k"] > 1`, false},
		{`config.m[?"k"].orValue(0) > 1`, false},
		{`config.m.k > 1`, true},
		{`config.m["k"] > 1 || request.format == "chat"`, true},
	} {
		_, ds := engine.Load("t.yaml", []byte(head+"routes: [chat]\nvars: {m: {a: 1}}\nnodes:\n  - {id: gate, type: t-fetch, when: '"+tc.when+"'}\n  - {id: decode, type: t-decode, needs: [gate]}\n"), engine.LoadOptions{})
		if got := strings.Contains(ds.String(), "vars/invalid-use"); got != tc.bad {
			t.Errorf("%s: %s", tc.when, ds)
		}
	}
}

// More failures the search finds with no rule of their own: a regex from
// the request, a modulo, an index computed from a header, an optional's
// value of a list element.
func TestSearchFinds(t *testing.T) {
	for _, tc := range []struct{ when, want string }{
		{`request.model.matches(request.headers[?"x-re"].orValue(".*"))`, `error parsing regexp`},
		{`tokens.count % size(media) == 1`, `modulus by zero`},
		{`request.headers[?"x-i"].orValue("0").matches("^-?[0-9]$") && ["a", "b"][int(request.headers[?"x-i"].orValue("0"))] == "a"`, `x-i: "-1"`},
		{`media[?0].value().size > 1`, `optional.none() dereference`},
		{`request.headers[?"x-tags"].orValue("a,b").split(",")[1] == "b"`, `x-tags: ""`},
	} {
		_, ds := engine.Load("t.yaml", []byte(head+"routes: [chat]\nnodes:\n  - {id: fetch, type: t-fetch}\n  - {id: gate, type: t-fetch, needs: [fetch], when: '"+tc.when+"'}\n  - {id: decode, type: t-decode, needs: [gate]}\n"), engine.LoadOptions{})
		if s := ds.String(); !strings.Contains(s, "cel/may-fail") || !strings.Contains(s, tc.want) {
			t.Errorf("%s: %s", tc.when, s)
		}
	}
}
