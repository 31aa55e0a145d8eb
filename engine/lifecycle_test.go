package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/celflow/celflow/engine"
)

// lifeNode records what its build saw and how often it was closed.
type lifeNode struct {
	seen   string // the "greeting" service its Build found
	closed atomic.Int32
}

func (n *lifeNode) Contract() engine.Contract {
	return engine.Contract{Responds: true, Terminal: true}
}
func (n *lifeNode) Run(context.Context, *engine.Exec) engine.Result { return engine.Result{} }
func (n *lifeNode) Close() error                                    { n.closed.Add(1); return nil }

var (
	lifeMu    sync.Mutex
	lifeBuilt []*lifeNode // every node built, in order
)

// t-life is registered at init, as every test type is: registering it in a
// test made the registry (and the unknown-type golden's list) depend on
// which tests ran before.
func init() {
	engine.Register(engine.NodeType{Name: "t-life", Build: func(b *engine.BuildContext, _ json.RawMessage) (engine.Node, error) {
		g, _ := engine.Service[string](b, "greeting")
		n := &lifeNode{seen: g}
		lifeMu.Lock()
		lifeBuilt = append(lifeBuilt, n)
		lifeMu.Unlock()
		return n, nil
	}})
}

// built returns the nodes built since mark (len(lifeBuilt) before a load).
func builtSince(mark int) []*lifeNode {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	return append([]*lifeNode(nil), lifeBuilt[mark:]...)
}

func lifeMark() int {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	return len(lifeBuilt)
}

const lifeWF = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: life}
nodes:
  - id: a
    type: t-life
`

// The node lifecycle: Build gets its services from the build context (the
// caller's map is not the nodes' own), a workflow that loads is closed by
// Close, each Closer once however often Close is called, and a workflow
// that fails to load closes the nodes it had built (a refused reload
// leaks nothing).
func TestNodeLifecycle(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		services engine.Services
		loads    bool
		seen     string
	}{
		{"loads", lifeWF, engine.Services{"greeting": "hello"}, true, "hello"},
		{"no services", lifeWF, nil, true, ""},
		{"graph error after the build", lifeWF + "    needs: [nope]\n", engine.Services{"greeting": "hi"}, false, "hi"},
		{"schema error elsewhere", lifeWF + "  - {id: b, type: t-life, bogus: 1}\n", nil, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mark := lifeMark()
			w, ds := engine.Load("life.yaml", []byte(tc.src), engine.LoadOptions{Services: tc.services})
			if (w != nil) != tc.loads {
				t.Fatalf("loaded %v, want %v: %s", w != nil, tc.loads, ds)
			}
			nodes := builtSince(mark)
			if len(nodes) == 0 {
				t.Fatal("no node built")
			}
			for _, n := range nodes {
				if n.seen != tc.seen {
					t.Errorf("service seen %q, want %q", n.seen, tc.seen)
				}
			}
			wantClosed := int32(0)
			if !tc.loads {
				wantClosed = 1 // Load closed them
			}
			for _, n := range nodes {
				if got := n.closed.Load(); got != wantClosed {
					t.Errorf("closed %d times after Load, want %d", got, wantClosed)
				}
			}
			if err := w.Close(); err != nil { // nil workflow: a no-op
				t.Fatal(err)
			}
			_ = w.Close()
			for _, n := range nodes {
				if got := n.closed.Load(); got != 1 {
					t.Errorf("closed %d times after two Close calls, want 1", got)
				}
			}
		})
	}
}

// A service of the wrong type is the composition root's bug: the load
// fails naming the node type instead of the node running without it.
func TestServiceWrongType(t *testing.T) {
	_, ds := engine.Load("life.yaml", []byte(lifeWF), engine.LoadOptions{Services: engine.Services{"greeting": 42}})
	if !ds.HasErrors() || !strings.Contains(ds.String(), `service "greeting" is a int, not a string`) {
		t.Fatalf("diagnostics: %s", ds)
	}
	b := &engine.BuildContext{Services: engine.Services{"greeting": "x"}}
	if v, ok := engine.Service[string](b, "greeting"); !ok || v != "x" {
		t.Errorf("Service = %q, %v", v, ok)
	}
	if _, ok := engine.Service[string](b, "absent"); ok {
		t.Error("an absent service was found")
	}
	if _, ok := engine.Service[string](nil, "greeting"); ok {
		t.Error("a nil build context has services")
	}
}
