package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// Workflow is a compiled workflow: immutable after Load and safe for
// concurrent use by any number of requests. It implements Runner.
type Workflow struct {
	name, version, hash, file string
	description               string
	routes                    [4]bool // indexed by Route
	requestTimeout            time.Duration

	nodes []*cnode
	env   *celenv.Env
	succ  [][]edgeRef // per node: the edges leaving it
	nedge int         // total number of edges
	tests []testCase
	doc   *schema.Doc
	pool  *sync.Pool // of *scratch
	entry Entry      // explain's and tests' entry (LoadOptions.Entry)

	searched   int              // requests the load-time search evaluated (search.go)
	searchList []*searchExpr    // what it searched, for Search
	onCELError string           // defaults.on_cel_error: "safe" or "fail" (celerror.go)
	celLog     *celenv.ErrorLog // the rate limit of its CEL error log, shared with explain's copy

	// closing makes Close happen once. A pointer, because explain's stub
	// copies the struct (and shares it: only the loaded workflow is closed).
	closing *closeState
}

// closeState is Close's once and its result.
type closeState struct {
	once sync.Once
	err  error
}

// cnode is one compiled node.
type cnode struct {
	idx         int
	id, typ     string
	description string
	ptr         string // JSON pointer of the node in the document
	node        Node
	contract    Contract
	merger      Merger

	when    *celenv.Expr
	foreach *celenv.Expr
	needs   []cedge
	joinAny bool

	maxParallel, tolerate int
	timeout               time.Duration
	retry                 retryPolicy
	targets               []targetRule // where its legs go (target.go); nil: the role's defaults
}

// cedge is one need: the edge from node `from` into its owner.
type cedge struct {
	from  int
	cond  *celenv.Expr // nil: fires when the predecessor succeeded or was skipped
	hasIf bool         // the document gave a condition (even one that did not compile)
	label string       // "render" or "try_decode[response.status == 412]"
	gidx  int          // index in the run's edge table
}

// edgeRef locates an edge from its source: the k-th need of node `to`.
type edgeRef struct{ to, k int }

// retryPolicy is a node's resolved retry settings.
type retryPolicy struct {
	attempts            int
	backoff, maxBackoff time.Duration
	jitter              bool
	cond                *celenv.Expr // nil: retry retryable failures (5xx, transport, timeouts)
	condPtr             string
}

// hotNode is what the walk reads about a node on every request, derived
// from the compiled node when a scratch is made (so once per pooled run
// state, never per request).
type hotNode struct {
	// guard is the when: guard's value known without evaluating it, per
	// Route (slot 0: no request or an unknown route): a literal, or a guard
	// that depends on request.format alone (celenv.Expr.OnRoute). Unknown
	// means evaluate. CEL's && and || absorb errors, so a known value is
	// exactly what evaluation would return.
	guard      [4]celenv.Tri
	guardFalse string // skip reason: "guard false: <src>"
	omitted    string // omit reason of a node with a single need
	// media, tokens: the node provides run data the CEL view mirrors, so
	// its completion refreshes it.
	media, tokens bool
	// allMedia: the foreach list is `media` itself, read from the run
	// without evaluating it.
	allMedia bool
}

// hotEdge is the per-request view of an edge (indexed by cedge.gidx).
type hotEdge struct {
	// memo: the condition's value about a failed node, computed to decide
	// whether the failure is handled, is reused when the edges propagate.
	// The only state that changes in between is the node's reason (it
	// gains "handled by an outgoing edge"), so conditions that mention
	// `reason` are evaluated again.
	memo bool
}

// hotTables derives the walk's per-node and per-edge tables.
func (w *Workflow) hotTables() ([]hotNode, []hotEdge) {
	hn := make([]hotNode, len(w.nodes))
	he := make([]hotEdge, w.nedge)
	for i, n := range w.nodes {
		h := &hn[i]
		if x := n.when; x != nil {
			h.guardFalse = "guard false: " + x.Src
			if x.Const != nil {
				h.guard[0] = celenv.False
				if *x.Const {
					h.guard[0] = celenv.True
				}
			}
			for _, r := range Routes {
				if int(r) < len(h.guard) {
					h.guard[r] = x.OnRoute(r.String())
				}
			}
		}
		h.allMedia = n.foreach != nil && strings.TrimSpace(n.foreach.Src) == "media"
		if len(n.needs) == 1 {
			h.omitted = "no incoming edge fired: " + n.needs[0].label
		}
		h.media = providesAny(n.contract, []AnyKey{KeyMedia, KeyFeatures})
		h.tokens = providesAny(n.contract, []AnyKey{KeyTokens})
		for _, e := range n.needs {
			if e.cond != nil && e.gidx < len(he) {
				he[e.gidx].memo = !strings.Contains(e.cond.Src, "reason")
			}
		}
	}
	return hn, he
}

// NodeInfo describes one compiled node, for tools (graph, explain, docs).
type NodeInfo struct {
	ID, Type, Description string
	When, ForEach         string
	Needs                 []NeedInfo
	JoinAny               bool
	Contract              Contract
	MaxParallel, Tolerate int
	Timeout               time.Duration
	Attempts              int
}

// NeedInfo is one incoming edge.
type NeedInfo struct {
	Node string
	If   string
}

// Name, Version, Hash (sha256 of the file bytes, hex) and File identify the workflow.
func (w *Workflow) Name() string        { return w.name }
func (w *Workflow) Version() string     { return w.version }
func (w *Workflow) Hash() string        { return w.hash }
func (w *Workflow) File() string        { return w.file }
func (w *Workflow) Description() string { return w.description }

// Serves reports whether the workflow serves route r.
func (w *Workflow) Serves(r Route) bool { return int(r) < len(w.routes) && w.routes[r] }

// RequestTimeout is the workflow-level deadline (0 = off).
func (w *Workflow) RequestTimeout() time.Duration { return w.requestTimeout }

// Nodes describes the nodes in declaration order.
func (w *Workflow) Nodes() []NodeInfo {
	out := make([]NodeInfo, len(w.nodes))
	for i, n := range w.nodes {
		ni := NodeInfo{ID: n.id, Type: n.typ, Description: n.description, JoinAny: n.joinAny,
			Contract: n.contract, MaxParallel: n.maxParallel, Tolerate: n.tolerate,
			Timeout: n.timeout, Attempts: n.retry.attempts}
		if n.when != nil {
			ni.When = n.when.Src
		}
		if n.foreach != nil {
			ni.ForEach = n.foreach.Src
		}
		for _, e := range n.needs {
			ne := NeedInfo{Node: w.nodes[e.from].id}
			if e.cond != nil {
				ne.If = e.cond.Src
			}
			ni.Needs = append(ni.Needs, ne)
		}
		out[i] = ni
	}
	return out
}

// Built returns the built nodes in declaration order (nil for a node whose
// build failed, in a workflow that did not load). The composition root reads
// what a node contributes to its generation beyond requests (the async
// broker's header names) from them; nodes are immutable, so sharing them is
// safe.
func (w *Workflow) Built() []Node {
	out := make([]Node, len(w.nodes))
	for i, n := range w.nodes {
		out[i] = n.node
	}
	return out
}

// Close closes every node of the workflow that holds something (Closer),
// once; later calls return the first result. Call it when no request will
// start on the workflow any more: a request still running may go on (a
// node's Close releases idle resources only), but what it opens afterwards
// is not released again. A nil workflow closes nothing.
func (w *Workflow) Close() error {
	if w == nil || w.closing == nil {
		return nil
	}
	cs := w.closing
	cs.once.Do(func() {
		var errs []error
		for _, n := range w.nodes {
			if c, ok := n.node.(Closer); ok {
				if err := c.Close(); err != nil {
					errs = append(errs, fmt.Errorf("node %s: %w", n.id, err))
				}
			}
		}
		cs.err = errors.Join(errs...)
	})
	return cs.err
}

var _ Runner = (*Workflow)(nil)

// CompileCount is how many CEL expressions and JSON Schemas have been
// compiled since the process started. Everything compiles at load; tests
// use it to prove that serving requests compiles nothing (docs/acceptance.md item 50).
func CompileCount() int64 { return celenv.CompileCount() + schema.CompileCount() }
