package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// LoadOptions carries what node types need to build.
type LoadOptions struct {
	// Upstream is the client worker nodes send legs through (the serve
	// config's *upstream.Client: the core names no worker type, it only
	// checks target rules' pools against it); nodes read it as the service
	// ServiceUpstream. nil (or a nil pointer) means validate-only: node
	// types skip "has a target" checks (validate, explain, test and graph
	// load this way).
	Upstream Pools
	// Services are the other services the composition root lends this
	// build's nodes (the async runtime...), by name; see BuildContext.
	// Upstream, when set, takes the name ServiceUpstream.
	Services Services
	// Pools is what target rules' pools are checked against (serve,
	// validate --config); nil falls back to Upstream.
	Pools Pools
	// WriteTimeout is the server's write_timeout, passed to BuildContext.
	WriteTimeout time.Duration
	// Entry is the front's entry (front.Entry), which explain and the
	// tests: block run each request through exactly as serve does; nil:
	// the core's own (NewRequest under a fresh id), for the core's tests.
	Entry Entry
}

// services is what every node of the build sees: its own map, so that a
// node cannot reach the caller's.
func (o *LoadOptions) services() Services {
	svc := make(Services, len(o.Services)+1)
	for k, v := range o.Services {
		svc[k] = v
	}
	if up := o.upstream(); up != nil {
		svc[ServiceUpstream] = up
	}
	return svc
}

// upstream is o.Upstream, nil for a nil interface or a nil pointer in it.
func (o *LoadOptions) upstream() Pools {
	if o.Upstream == nil {
		return nil
	}
	if v := reflect.ValueOf(o.Upstream); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return o.Upstream
}

// Defaults that apply when the workflow says nothing.
const (
	DefaultMaxParallel = 8
	DefaultBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff  = 2 * time.Second
)

// LoadFile reads and compiles a workflow file.
func LoadFile(path string, opts LoadOptions) (*Workflow, schema.Diagnostics) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, schema.Diagnostics{{File: path, Msg: "cannot read workflow: " + err.Error(), Rule: schema.RuleInput}}
	}
	return Load(path, data, opts)
}

// Load compiles a workflow document. It returns every problem at once,
// sorted; the Workflow is nil when any of them is an error. Warnings come
// back with a non-nil Workflow. The content hash is the sha256 of data.
func Load(file string, data []byte, opts LoadOptions) (*Workflow, schema.Diagnostics) {
	doc, ds := schema.LoadYAML(file, data)
	if doc == nil {
		return nil, ds.Sort().WithSource(file, data)
	}
	sum := sha256.Sum256(data)
	w, more := compile(doc, opts, hex.EncodeToString(sum[:]))
	ds = dropCascades(append(ds, more...)).Sort().WithSource(file, data)
	if ds.HasErrors() {
		w.Close() // the nodes that did build release what they opened
		return nil, ds
	}
	return w, ds
}

// dropCascades removes what follows from a value YAML read as a tag
// (schema.RuleYAMLTag): the CEL errors of its text at the same path repeat
// the one cause the tag diagnostic names with its fix.
func dropCascades(ds schema.Diagnostics) schema.Diagnostics {
	tagged := map[string]bool{}
	for _, d := range ds {
		if d.Rule == schema.RuleYAMLTag {
			tagged[d.File+"\x00"+d.Path] = true
		}
	}
	if len(tagged) == 0 {
		return ds
	}
	out := ds[:0:0]
	for _, d := range ds {
		if d.Rule != schema.RuleYAMLTag && tagged[d.File+"\x00"+d.Path] {
			continue
		}
		out = append(out, d)
	}
	return out
}

// LoadDoc compiles a workflow that is part of a larger document (the serve
// config's inline `workflow:`, see schema.Doc.Sub). The content hash is the
// sha256 of the document's canonical JSON.
func LoadDoc(doc *schema.Doc, opts LoadOptions) (*Workflow, schema.Diagnostics) {
	sum := sha256.Sum256(doc.JSON(""))
	w, ds := compile(doc, opts, hex.EncodeToString(sum[:]))
	ds = doc.AttachSource(ds.Sort())
	if ds.HasErrors() {
		w.Close() // the nodes that did build release what they opened
		return nil, ds
	}
	return w, ds
}

// compiler carries one load: the document, what was built so far and the
// diagnostics collected. Each stage adds what it finds and goes on, so a
// file with several problems reports them all.
type compiler struct {
	doc  *schema.Doc
	opts LoadOptions
	ds   schema.Diagnostics
	w    *Workflow
	ids  map[string]int // node id → index, first occurrence
	vars map[string]any
	// nullVars are vars without a value (reported at the var): an
	// expression that reads one is not compiled, so that it adds no
	// diagnostics of its own (a cost limit of 2^64-1...).
	nullVars []string
	defs     defaultsDoc
	specs    []nodeSpec // one per node entry, parallel to w.nodes
	// needSpecIdx[i][k] is the spec index of node i's k-th resolved need.
	needSpecIdx [][]int
	allow       []allowDoc // accepted findings (loadlit.go)
	allowUsed   []bool
}

func compile(doc *schema.Doc, opts LoadOptions, hash string) (*Workflow, schema.Diagnostics) {
	opts.Services = opts.services()
	c := &compiler{doc: doc, opts: opts, ids: map[string]int{},
		w: &Workflow{file: doc.File, hash: hash, doc: doc, pool: &sync.Pool{}, closing: &closeState{}, entry: opts.Entry,
			onCELError: OnCELErrorFail, celLog: &celenv.ErrorLog{}}}
	c.ds = schema.Validate(doc, schema.WorkflowID, "")
	if _, ok := doc.Root.(map[string]any); !ok {
		return nil, c.ds
	}
	var wd workflowDoc
	schema.Decode(doc, "", &wd)
	c.header(&wd)
	c.nodes(wd.Nodes)
	c.cel()
	c.graph()
	c.allow = wd.Allow
	c.search() // search.go: expressions that fail for some request
	c.tests(wd.Tests)
	return c.w, c.ds
}

// header reads metadata, routes, defaults, request_timeout and vars.
func (c *compiler) header(wd *workflowDoc) {
	if md := wd.Metadata; md != nil {
		c.w.name, c.w.version, c.w.description = md.Name.V, md.Version.V, md.Description.V
	}
	if wd.Routes.Set {
		for _, s := range wd.Routes.V {
			if rt, ok := ParseRoute(s); ok {
				c.w.routes[rt] = true
			}
		}
	} else {
		for _, r := range Routes {
			c.w.routes[r] = true
		}
	}
	c.w.requestTimeout = wd.RequestTimeout.V
	c.defs = defaultsDoc{maxParallel: DefaultMaxParallel}
	if d := wd.Defaults; d != nil {
		c.defs.kv, c.defs.ec = d.KVConnector.V, d.ECConnector.V
		c.defs.tokensIn = d.Format.V == "tokens-in"
		c.defs.timeout = d.Timeout.V
		if d.MaxParallel.Set {
			c.defs.maxParallel = d.MaxParallel.V
		}
		c.defs.retry = d.Retry
		if d.OnCELError.V != "" {
			c.w.onCELError = d.OnCELError.V
		}
	}
	c.vars = map[string]any{}
	for _, e := range wd.Vars {
		if !isIdent(e.Key) {
			c.ds = append(c.ds, c.doc.DiagKey(e.KeyPos.Ptr, schema.Error,
				"var name "+quote(e.Key)+" is not a CEL identifier (letters, digits and _, not starting with a digit)").R(RuleVarName))
			continue
		}
		if e.V.V == nil {
			// An empty value (`long_prompt:`) is null: every expression that
			// reads it would fail (or cost "unbounded"), so say so once, here.
			c.ds = append(c.ds, c.doc.DiagKey(e.KeyPos.Ptr, schema.Error,
				"var "+e.Key+" is null (no value after "+quote(e.Key+":")+"): every expression that reads config."+e.Key+" would fail").
				R(RuleVarNull).H("give it a value: a number, a quoted string, a list [..] or a map {..}, or remove it"))
			c.nullVars = append(c.nullVars, e.Key)
		}
		c.vars[e.Key] = e.V.V
	}
}

// defaultsDoc is the workflow's `defaults:`.
type defaultsDoc struct {
	kv, ec      string
	tokensIn    bool
	timeout     time.Duration
	maxParallel int
	retry       *retryDoc
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
