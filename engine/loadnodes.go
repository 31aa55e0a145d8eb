package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// nodeSpec is what the document says about one node, before compiling.
type nodeSpec struct {
	ptr           string
	id, typ       string
	idOK          bool // a valid, unique CEL identifier
	when, foreach string
	needs         []needSpec
	retry         *retryDoc
	hasType       bool
	fanOut        bool
	targets       []targetSpec
}

type needSpec struct {
	ptr, ifPtr string // the need (or its node field) and its if:
	node, cond string
	expr       *celenv.Expr
}

var identRE = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)

// CEL reserved words cannot name a node or a var.
var reserved = map[string]bool{
	"true": true, "false": true, "null": true, "in": true, "as": true, "break": true, "const": true,
	"continue": true, "else": true, "for": true, "function": true, "if": true, "import": true,
	"let": true, "loop": true, "package": true, "namespace": true, "return": true, "var": true,
	"void": true, "while": true,
}

func isIdent(s string) bool { return identRE.MatchString(s) && !reserved[s] }

func (c *compiler) nodes(list []nodeDoc) {
	for i := range list {
		nd := &list[i]
		ptr := nd.Ptr
		sp := nodeSpec{ptr: ptr, id: nd.ID.V, typ: nd.Type.V, when: nd.When.V, foreach: nd.ForEach.V, retry: nd.Retry}
		sp.targets = parseTargets(nd.Target)
		n := &cnode{idx: i, id: sp.id, typ: sp.typ, ptr: ptr, maxParallel: c.defs.maxParallel, timeout: c.defs.timeout}
		n.description = nd.Description.V
		n.joinAny = nd.Join.V == "any"
		if nd.MaxParallel.Set {
			n.maxParallel = nd.MaxParallel.V
		}
		n.tolerate = nd.Tolerate.V
		if nd.Timeout.Set {
			n.timeout = nd.Timeout.V
		}
		c.checkID(&sp, i)
		for _, nr := range nd.Needs {
			if nr.Short {
				sp.needs = append(sp.needs, needSpec{ptr: nr.Ptr, node: nr.Node.V})
				continue
			}
			sp.needs = append(sp.needs, needSpec{ptr: nr.Node.Ptr, ifPtr: nr.If.Ptr, node: nr.Node.V, cond: nr.If.V})
		}
		c.build(n, &sp, nd)
		c.w.nodes = append(c.w.nodes, n)
		c.specs = append(c.specs, sp)
	}
}

func (c *compiler) checkID(sp *nodeSpec, i int) {
	idPtr := sp.ptr + "/id"
	if !c.doc.Has(idPtr) {
		return // the schema reported the missing id
	}
	switch {
	case !isIdent(sp.id):
		c.errf(RuleNodeID, idPtr, "node id %s is not a CEL identifier (letters, digits and _, not starting with a digit, not a reserved word): it must be readable as nodes.<id>", quote(sp.id))
	default:
		if first, dup := c.ids[sp.id]; dup {
			l, _ := c.doc.Pos(schema.Ptr("/nodes", first, "id"))
			c.errf(RuleDuplicateID, idPtr, "duplicate node id %s (first declared at line %d)", quote(sp.id), l)
			return
		}
		c.ids[sp.id] = i
		sp.idOK = true
	}
}

// build validates params against the node type's schema and calls Build.
func (c *compiler) build(n *cnode, sp *nodeSpec, nd *nodeDoc) {
	typePtr := sp.ptr + "/type"
	if sp.typ == "" {
		return
	}
	t, ok := LookupType(sp.typ)
	if !ok {
		known := TypeNames()
		msg := "unknown node type " + quote(sp.typ)
		if s := closestName(sp.typ, known); s != "" {
			msg += " (did you mean " + quote(s) + "?)"
		}
		c.errf(RuleUnknownType, typePtr, "%s; known types: %s", msg, strings.Join(known, ", "))
		return
	}
	sp.hasType, sp.fanOut = true, t.FanOut
	id, err := nodeSchema(t)
	if err != nil {
		c.errf(schema.RuleInternal, typePtr, "node type %s has an invalid params schema: %v", quote(t.Name), err)
		return
	}
	paramsPtr := sp.ptr + "/params"
	params := nd.Params.V
	if !nd.Params.Set {
		params = map[string]any{}
	}
	pds := schema.ValidateValue(c.doc, id, paramsPtr, params)
	c.ds = append(c.ds, pds...)
	if pds.HasErrors() {
		return
	}
	raw, _ := json.Marshal(params)
	bctx := &BuildContext{
		Services:      c.opts.Services,
		Defaults:      Defaults{KVConnector: c.defs.kv, ECConnector: c.defs.ec, TokensIn: c.defs.tokensIn},
		WriteTimeout:  c.opts.WriteTimeout,
		RetryAttempts: retryAttempts(nd.Retry, c.defs.retry),
		Warn: func(path, msg string) {
			c.ds = append(c.ds, c.doc.Diag(paramsPtr+path, schema.Warning, msg).R(RuleParams))
		},
	}
	node, err := safeBuild(t, bctx, raw)
	if err != nil {
		c.paramErrors(paramsPtr, err)
		return
	}
	n.node = node
	n.contract = node.Contract()
	n.merger, _ = node.(Merger)
}

// safeBuild calls Build, turning a panic into an error: a broken node type
// must not take `celflow validate` down.
func safeBuild(t NodeType, b *BuildContext, raw json.RawMessage) (n Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("node type %s panicked while building: %v", t.Name, r)
		}
	}()
	n, err = t.Build(b, raw)
	if err == nil && n == nil {
		err = fmt.Errorf("node type %s built no node", t.Name)
	}
	return n, err
}

func (c *compiler) paramErrors(paramsPtr string, err error) {
	var pes ParamErrors
	var pe *ParamError
	switch {
	case errors.As(err, &pes):
		for _, e := range pes {
			c.errf(e.rule(), paramsPtr+e.Path, "%s", e.Msg)
		}
	case errors.As(err, &pe):
		c.errf(pe.rule(), paramsPtr+pe.Path, "%s", pe.Msg)
	default:
		c.errf(RuleParams, paramsPtr, "%v", err)
	}
}

func (e *ParamError) rule() string {
	if e.Rule != "" {
		return e.Rule
	}
	return RuleParams
}

// retryAttempts is BuildContext.RetryAttempts: the attempts the node's
// retry block sets, else those defaults.retry sets, 0 when neither sets
// attempts (a block of backoff alone says nothing about how many).
func retryAttempts(own, defs *retryDoc) int {
	for _, rd := range []*retryDoc{own, defs} {
		if rd != nil && rd.Attempts.Set {
			return max(rd.Attempts.V, 1)
		}
	}
	return 0
}

// nodeSchema registers (once) and returns the schema id of a type's params.
func nodeSchema(t NodeType) (string, error) {
	id := schema.NodeSchemaID(t.Name)
	src := t.Schema
	if len(src) == 0 {
		src = []byte(`{"type":"object","additionalProperties":false}`)
	}
	if err := schema.Register(id, src); err != nil {
		return "", err
	}
	return id, nil
}

func closestName(name string, cands []string) string {
	best, bestD := "", 1<<30
	for _, c := range cands {
		if d := celenv.Distance(name, c); d <= max(1, len(name)/3) && d < bestD {
			best, bestD = c, d
		}
	}
	return best
}
