package engine_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

// Test-only node types providing a rendezvous key and a plain one.
var (
	meetKey  = engine.NewKey[*int]("test-meet").Meet()
	plainKey = engine.NewKey[int]("test-plain")
)

type keyNode struct{ c engine.Contract }

func (n keyNode) Contract() engine.Contract                       { return n.c }
func (n keyNode) Run(context.Context, *engine.Exec) engine.Result { return engine.Result{} }
func keyType(name string, c engine.Contract) engine.NodeType {
	return engine.NodeType{Name: name, Schema: []byte(`{"type":"object"}`),
		Build: func(*engine.BuildContext, json.RawMessage) (engine.Node, error) { return keyNode{c}, nil }}
}

func init() {
	engine.Register(keyType("k-meet", engine.Contract{Provides: []engine.AnyKey{meetKey}}))
	engine.Register(keyType("k-plain", engine.Contract{Provides: []engine.AnyKey{plainKey}}))
	engine.Register(keyType("k-pool", engine.Contract{Role: "decode", Responds: true, Terminal: true}))
}

// Two unordered providers of a key race on the run, unless the key is a
// rendezvous that its providers make together (the SGLang session).
func TestMeetKeyProviders(t *testing.T) {
	const doc = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: kf}
routes: [chat]
nodes:
  - {id: a, type: TYPE}
  - {id: b, type: TYPE}
  - {id: d, type: k-pool, needs: [a, b]}
`
	for _, tc := range []struct {
		typ string
		ok  bool
	}{{"k-meet", true}, {"k-plain", false}} {
		w, ds := engine.Load("kf.yaml", []byte(strings.ReplaceAll(doc, "TYPE", tc.typ)), engine.LoadOptions{})
		if (w != nil) != tc.ok {
			t.Errorf("%s: loaded %v, want %v:\n%s", tc.typ, w != nil, tc.ok, ds)
		}
		if !tc.ok && !strings.Contains(ds.String(), "both provide test-plain") {
			t.Errorf("%s: %s", tc.typ, ds)
		}
	}
}

type fakePools []string

func (p fakePools) HasPool(name string) bool { return slices.Contains(p, name) }
func (p fakePools) PoolNames() []string      { return p }

// A target rule's pool is checked against LoadOptions.Pools when given.
func TestTargetPools(t *testing.T) {
	const doc = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: tp}
routes: [chat]
nodes:
  - {id: d, type: k-pool, target: [{pool: POOL}]}
`
	for _, tc := range []struct {
		pools engine.Pools
		pool  string
		want  string
	}{
		{nil, "anything", ""},
		{fakePools{"big", "small"}, "small", ""},
		{fakePools{"big", "small"}, "smal", `no pool named "smal" in upstream.pools (did you mean "small"?); pools: big, small`},
	} {
		w, ds := engine.Load("tp.yaml", []byte(strings.Replace(doc, "POOL", tc.pool, 1)), engine.LoadOptions{Pools: tc.pools})
		if tc.want == "" && w == nil || tc.want != "" && (w != nil || !strings.Contains(ds.String(), tc.want)) {
			t.Errorf("pool %s: loaded %v:\n%s", tc.pool, w != nil, ds)
		}
	}
}
