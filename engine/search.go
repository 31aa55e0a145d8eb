package engine

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// The counterexample search. After a workflow compiles without errors, the
// loader evaluates every guard, foreach list, edge condition, target rule
// condition and retry rule against generated requests, built the way serve
// builds them (the workflow's entry, then the same activation code as a
// run: celRequest, celTokens, celState), and reports the first request that
// makes an expression fail (rule cel/may-fail).
//
// The requests cover what the expression can see: each route the workflow
// serves; each header it reads absent, empty, malformed and at the values
// its literals and vars suggest (strings with 0 to 3 of a split separator,
// numbers around each int literal); no media, one and three items of each
// modality and a mix (none on completions; on generate as the front parses
// features: no type, no size); token counts unknown, 0, 1, around a KV block
// (16) and around each int literal; the model absent, "m" and each compared
// value; node outcomes (status, HTTP status, response headers, duration,
// attempt) for the nodes it reads. Only the dimensions an expression reads
// are varied. Requests are tried in a fixed order, simplest first: the
// default of every dimension, then one dimension changed at a time, then
// two, and so on, up to searchPerExpr requests per expression and
// searchPerWorkflow per workflow (no shipped workflow comes near either).

// Bounds of the search.
const (
	searchPerExpr     = 8000
	searchPerWorkflow = 50000
	// kvBlock is the token count around which requests are tried (a KV
	// cache block of the usual 16 tokens: a prompt under one block never
	// gets a predicted hit).
	kvBlock = 16
	// maxProbeTokens caps the token counts tried (int literals above it are
	// tried at the cap).
	maxProbeTokens = 1 << 17
)

// RuleCELMayFail is the search's rule.
const RuleCELMayFail = celenv.RuleMayFail

// searchExpr is one expression the search evaluates, with where it is
// evaluated at run time.
type searchExpr struct {
	x    *celenv.Expr
	ptr  string
	what string // "guard", "foreach list", "edge condition", "target rule's if", "retry rule"
	// node is the node whose guard must hold for the expression to be
	// evaluated (-1: none, the guard itself); about is the node outcome
	// and response stand for (-1: none).
	node, about int
	before      []*celenv.Expr // earlier target rules of the node: false when this one is evaluated
	attempts    int            // retry rules: the node's attempts
	alwaysFails bool           // a foreach list has no safe value
}

// finding is the first failing request of an expression.
type finding struct {
	se        *searchExpr
	err       string
	req       string
	line, col int
	node      celast.Expr
}

// searchExprs lists the workflow's expressions in a fixed order: node by
// node, guard, foreach, target rules, edge conditions, retry rule.
func (c *compiler) searchExprs() []*searchExpr {
	var out []*searchExpr
	seen := map[string]bool{}
	for i, n := range c.w.nodes {
		if n.when != nil {
			out = append(out, &searchExpr{x: n.when, ptr: c.specs[i].ptr + "/when", what: "guard", node: -1, about: -1})
		}
		if n.foreach != nil {
			out = append(out, &searchExpr{x: n.foreach, ptr: c.specs[i].ptr + "/foreach", what: "foreach list", node: i, about: -1, alwaysFails: true})
		}
		var before []*celenv.Expr
		for k := range n.targets {
			r := &n.targets[k]
			if r.cond == nil {
				continue
			}
			out = append(out, &searchExpr{x: r.cond, ptr: c.specs[i].targets[k].ptr + "/if", what: "target rule's if", node: i, about: -1, before: slices.Clone(before)})
			before = append(before, r.cond)
		}
		for k := range n.needs {
			e := &n.needs[k]
			if e.cond == nil {
				continue
			}
			out = append(out, &searchExpr{x: e.cond, ptr: c.specs[i].needs[k].ifPtr, what: "edge condition", node: e.from, about: e.from})
		}
		// A shared defaults.retry.if is searched once, at its first node.
		if r := n.retry; r.cond != nil && r.attempts > 1 && !seen[r.condPtr] {
			seen[r.condPtr] = true
			out = append(out, &searchExpr{x: r.cond, ptr: r.condPtr, what: "retry rule", node: i, about: i, attempts: r.attempts})
		}
	}
	return out
}

// search runs the counterexample search and adds its diagnostics. It runs
// only on a workflow without errors so far: fix those first.
func (c *compiler) search() {
	if c.w == nil || c.w.env == nil {
		return
	}
	c.loadChecks()
	c.applyAllow(false)
	if c.ds.HasErrors() {
		return
	}
	c.runSearch()
	c.applyAllow(true)
}

func (c *compiler) runSearch() {
	s := newSearcher(c.w)
	c.w.searchList = c.searchExprs()
	defer func() { c.w.searched = searchPerWorkflow - s.budget }()
	for _, se := range c.w.searchList {
		f := s.first(se)
		if f == nil {
			continue
		}
		if constOnly(f.node) {
			continue // a var's problem: reported at the var (loadlit.go)
		}
		line, col := c.doc.ScalarPos(f.se.ptr, f.line, f.col)
		if c.reported(line, col) {
			continue // a dedicated rule said it better
		}
		sev, effect := schema.Error, "under on_cel_error: fail the request is answered 500"
		switch {
		case se.alwaysFails:
			effect = "the request is answered 500 (a foreach list has no safe value)"
		case c.w.onCELError == OnCELErrorSafe:
			sev, effect = schema.Warning, "under on_cel_error: safe it reads as false ("+safeEffect(se.what)+")"
		}
		c.ds = append(c.ds, schema.Diagnostic{File: c.doc.File, Line: line, Col: col, Path: c.doc.Path(f.se.ptr),
			Severity: sev, Rule: RuleCELMayFail,
			Msg: fmt.Sprintf("this %s fails at run time (%s) for some requests, e.g. %s; %s",
				se.what, f.err, f.req, effect),
			Hint: celenv.FixHint(se.x.Checked(), f.node)})
	}
}

func safeEffect(what string) string {
	switch what {
	case "guard":
		return "the node is skipped"
	case "edge condition":
		return "the edge does not hold"
	case "target rule's if":
		return "the rule does not match"
	case "retry rule":
		return "no retry"
	}
	return "its safe value"
}

// reported says whether a diagnostic already points at this place.
func (c *compiler) reported(line, col int) bool {
	for _, d := range c.ds {
		if d.File == c.doc.File && d.Line == line && d.Col == col {
			return true
		}
	}
	return false
}

// constOnly says whether n reads nothing but config and literals.
func constOnly(n celast.Expr) bool {
	if n == nil {
		return false
	}
	ok, any := true, false
	var walk func(e celast.Expr)
	walk = func(e celast.Expr) {
		switch e.Kind() {
		case celast.IdentKind:
			if e.AsIdent() == "config" {
				any = true
			} else {
				ok = false
			}
		case celast.ComprehensionKind:
			ok = false
		}
		for _, ch := range celenv.Children(e) {
			walk(ch)
		}
	}
	walk(n)
	return ok && any
}

// searcher holds what is shared by the expressions of one workflow: the
// activation, the entered requests by their key, the evaluation budget.
type searcher struct {
	w       *Workflow
	act     *celenv.Activation
	entered map[string]*Request // by probe.key
	budget  int
	ids     []int64 // shared zero token ids (counts are what CEL reads)
	vars    []string
}

func newSearcher(w *Workflow) *searcher {
	s := &searcher{w: w, act: w.env.NewActivation(len(w.nodes)), entered: map[string]*Request{}, budget: searchPerWorkflow}
	s.vars = varStrings(w.env)
	return s
}

// varStrings are the vars' string values and map keys, in a fixed order:
// values a request may carry so that a comparison with a var holds.
func varStrings(e *celenv.Env) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, el := range x {
				walk(el)
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				out = append(out, k)
				walk(x[k])
			}
		}
	}
	for _, v := range e.ConfigValues() {
		walk(v)
	}
	return out
}

// reads is what an expression reads, and the literals it compares with.
type reads struct {
	format, model, stream, id bool
	media, tokens             bool
	headers                   []string // request header names, in order of appearance
	anyHeader                 bool     // a computed header name, or the map iterated
	states                    map[int]*stateReads
	ints                      []int64
	strs, seps                []string
	durs                      []time.Duration
}

type stateReads struct {
	status, http, dur, attempt bool
	headers                    []string
}

func (r *reads) state(i int) *stateReads {
	if r.states == nil {
		r.states = map[int]*stateReads{}
	}
	if r.states[i] == nil {
		r.states[i] = &stateReads{}
	}
	return r.states[i]
}

func addStr(l []string, s string) []string {
	if slices.Contains(l, s) {
		return l
	}
	return append(l, s)
}

// analyze collects what x reads. about is the node outcome and response
// stand for (-1: none).
func (s *searcher) analyze(x *celenv.Expr, about int) *reads {
	r := &reads{}
	idx := map[string]int{}
	for i, n := range s.w.nodes {
		idx[n.id] = i
	}
	// stateOf maps a path to (node, rest of the path) for outcome, response
	// and nodes.<id>.
	stateOf := func(p string) (int, string, bool) {
		parts := strings.Split(p, ".")
		switch {
		case parts[0] == "outcome" && about >= 0:
			return about, strings.Join(parts[1:], "."), true
		case parts[0] == "response" && about >= 0:
			return about, strings.Join(append([]string{"response"}, parts[1:]...), "."), true
		case parts[0] == "nodes" && len(parts) >= 2:
			if i, ok := idx[parts[1]]; ok {
				return i, strings.Join(parts[2:], "."), true
			}
		}
		return 0, "", false
	}
	field := func(p string) {
		switch p {
		case "request.format", "request.path":
			r.format = true
		case "request.model":
			r.model = true
		case "request.stream":
			r.stream = true
		case "request.id":
			r.id = true
		}
		if i, rest, ok := stateOf(p); ok {
			st := r.state(i)
			switch rest {
			case "status":
				st.status = true
			case "response.status":
				st.http = true
			case "duration":
				st.dur = true
			case "attempt":
				st.attempt = true
			}
		}
	}
	headerKey := func(on string, key string, computed bool) {
		if on == "request.headers" {
			if computed {
				r.anyHeader = true
			} else {
				r.headers = addStr(r.headers, key)
			}
			return
		}
		if i, rest, ok := stateOf(on); ok && rest == "response.headers" {
			st := r.state(i)
			if !computed {
				st.headers = addStr(st.headers, key)
			}
		}
	}
	var walk func(e celast.Expr)
	walk = func(e celast.Expr) {
		switch e.Kind() {
		case celast.IdentKind:
			switch e.AsIdent() {
			case "media":
				r.media = true
			case "tokens":
				r.tokens = true
			}
		case celast.SelectKind:
			sel := e.AsSelect()
			if p := celenv.SelectPath(e); p != "" {
				field(p)
			}
			if op := celenv.SelectPath(sel.Operand()); op != "" {
				headerKey(op, sel.FieldName(), false)
				if sel.IsTestOnly() {
					field(op + "." + sel.FieldName())
				}
			}
		case celast.LiteralKind:
			switch v := e.AsLiteral().(type) {
			case types.Int:
				r.ints = append(r.ints, int64(v))
			case types.Uint:
				r.ints = append(r.ints, int64(v))
			case types.String:
				r.strs = addStr(r.strs, string(v))
			}
		case celast.CallKind:
			call := e.AsCall()
			args := call.Args()
			switch call.FunctionName() {
			case operators.Index, operators.OptIndex:
				if on := celenv.SelectPath(args[0]); on != "" {
					k, lit := args[1].AsLiteral().(types.String)
					headerKey(on, string(k), args[1].Kind() != celast.LiteralKind || !lit)
				}
			case operators.In:
				if on := celenv.SelectPath(args[1]); on != "" {
					if k, lit := args[0].AsLiteral().(types.String); args[0].Kind() == celast.LiteralKind && lit {
						headerKey(on, string(k), false)
					}
				}
			case "split":
				if len(args) > 0 && args[0].Kind() == celast.LiteralKind {
					if sep, ok := args[0].AsLiteral().(types.String); ok {
						r.seps = addStr(r.seps, string(sep))
					}
				}
			case "duration":
				if len(args) == 1 && args[0].Kind() == celast.LiteralKind {
					if d, ok := args[0].AsLiteral().(types.String); ok {
						if v, err := time.ParseDuration(string(d)); err == nil {
							r.durs = append(r.durs, v)
						}
					}
				}
			}
		case celast.ComprehensionKind:
			if celenv.SelectPath(e.AsComprehension().IterRange()) == "request.headers" {
				r.anyHeader = true
			}
		}
		for _, ch := range celenv.Children(e) {
			walk(ch)
		}
	}
	walk(x.Checked().Expr())
	if r.id {
		r.headers = addStr(r.headers, "x-request-id")
	}
	if r.anyHeader {
		r.headers = addStr(r.headers, "x-probe")
	}
	return r
}

// probe is one generated request and the run state around it.
type probe struct {
	route  Route
	model  int // index into modelVals
	stream bool
	hdr    []int // per header dimension: index into headerVals (0: absent)
	media  []MediaItem
	tokens int // -1: unknown (no render yet)
	states map[int]*Outcome
	skip   bool // not a request this route can carry
	tab    *probeReq
}

// dim is one dimension of the search: n values, index 0 the default.
type dim struct {
	n    int
	set  func(p *probe, i int)
	desc func(p *probe, i int) string
}

// first returns the first request that makes se fail, or nil.
func (s *searcher) first(se *searchExpr) *finding {
	r := s.analyze(se.x, se.about)
	dims, base := s.dims(se, r)
	var found *finding
	tried := 0
	try := func(idx []int) bool {
		if s.budget <= 0 || tried >= searchPerExpr {
			return false
		}
		p := base()
		for d, i := range idx {
			dims[d].set(p, i)
		}
		if p.skip {
			return true
		}
		tried++
		s.budget--
		if !s.load(p, se) {
			return true
		}
		var err error
		if se.x.Kind == celenv.ForEach {
			_, err = se.x.List(s.act)
		} else {
			_, err = se.x.Bool(s.act)
		}
		if err == nil {
			return true
		}
		line, col, node, ok := se.x.Locate(s.act)
		if !ok {
			line, col = 1, 0
		}
		var desc []string
		for d, i := range idx {
			if t := dims[d].desc(p, i); t != "" {
				desc = append(desc, t)
			}
		}
		found = &finding{se: se, err: shortErr(err), req: strings.Join(desc, ", "), line: line, col: col, node: node}
		return false
	}
	ns := make([]int, len(dims))
	for d := range dims {
		ns[d] = dims[d].n
	}
	celenv.Enumerate(ns, try)
	return found
}

// shortErr is a CEL evaluation error without the expression's text.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && strings.Contains(s, "exceeded the CEL cost limit") {
		return "the CEL cost limit" + s[i:]
	}
	return s
}

// load fills the activation from p the way a run does; false when the
// expression is not evaluated for p (the entry refuses it, the node's
// guard or an earlier target rule decides otherwise).
func (s *searcher) load(p *probe, se *searchExpr) bool {
	req := s.enter(p)
	if req == nil {
		return false
	}
	a := s.act
	a.Reset()
	a.Request = celRequest(req)
	a.Media = &Run{State: State{Media: p.media}}
	if p.tokens >= 0 {
		a.Tokens = celTokens(&Tokens{Known: true, IDs: s.tokenIDs(p.tokens)})
	} else {
		a.Tokens = celTokens(&Tokens{})
	}
	for i, o := range p.states {
		celState(&a.Nodes.States[i], o)
	}
	if se.node >= 0 {
		if g := s.w.nodes[se.node].when; g != nil {
			if ok, err := g.Bool(a); err != nil || !ok {
				return false
			}
		}
	}
	for _, b := range se.before {
		if ok, err := b.Bool(a); err != nil || ok {
			return false
		}
	}
	if se.about >= 0 {
		a.Outcome = &a.Nodes.States[se.about]
	}
	return true
}

func (s *searcher) tokenIDs(n int) []int64 {
	if len(s.ids) < n {
		s.ids = make([]int64, n)
	}
	return s.ids[:n]
}

// enter runs the workflow's entry for p's request part, once per distinct
// request; nil when the entry refuses it.
func (s *searcher) enter(p *probe) *Request {
	key := p.key()
	if r, ok := s.entered[key]; ok {
		return r
	}
	h, body := p.request()
	entry := s.w.entry
	if entry == nil {
		entry = coreEntry
	}
	in, e := entry(p.route, h, body)
	var req *Request
	if e == nil {
		req = in.Req
		if req.ID != h.Get("X-Request-Id") {
			// The entry drew an id (a UUID): a fixed one of the same shape
			// keeps the report the same on every load.
			r := *req
			r.ID = celenv.ProbeID
			req = &r
		}
	}
	s.entered[key] = req
	return req
}

// probeReq holds the values a probe's request fields take (per
// expression: from its literals and the vars).
type probeReq struct {
	headers    []string // header names, lowercase
	headerVals [][]*string
	modelVals  []*string
}

// key names p's request part (route, headers, model, stream): the entry
// runs once per distinct key.
func (p *probe) key() string {
	var b strings.Builder
	b.WriteString(p.route.String())
	for d, i := range p.hdr {
		if v := p.tab.headerVals[d][i]; v != nil {
			b.WriteByte(0)
			b.WriteString(p.tab.headers[d])
			b.WriteByte('=')
			b.WriteString(strconv.Quote(*v))
		}
	}
	if m := p.tab.modelVals[p.model]; m != nil {
		b.WriteString("\x00model=")
		b.WriteString(*m)
	}
	if p.stream {
		b.WriteString("\x00stream")
	}
	return b.String()
}

// request builds p's headers and body.
func (p *probe) request() (http.Header, []byte) {
	h := http.Header{}
	for d, i := range p.hdr {
		if v := p.tab.headerVals[d][i]; v != nil {
			h.Set(p.tab.headers[d], *v)
		}
	}
	body := map[string]any{}
	if m := p.tab.modelVals[p.model]; m != nil {
		body["model"] = *m
	}
	if p.stream {
		body["stream"] = true
	}
	switch p.route {
	case RouteChat:
		body["messages"] = []any{map[string]any{"role": "user", "content": "hi"}}
	case RouteCompletions:
		body["prompt"] = "hi"
	case RouteGenerate:
		body["token_ids"] = []int{1}
	}
	b, _ := json.Marshal(body)
	return h, b
}

// SearchCount is how many requests the load-time search evaluated for
// this workflow (benchmarks and tests: the bound is never near).
func (w *Workflow) SearchCount() int { return w.searched }

// Search runs the load-time search again over the loaded workflow's
// expressions and returns how many requests it evaluated and how many
// expressions failed for one (BenchmarkCounterexampleSearch times it
// apart from the rest of a load).
func (w *Workflow) Search() (requests, failing int) {
	s := newSearcher(w)
	for _, se := range w.searchList {
		if s.first(se) != nil {
			failing++
		}
	}
	return searchPerWorkflow - s.budget, failing
}
