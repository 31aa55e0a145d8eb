package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/engine/graph"
)

// The ending proof. For every route, the compiler walks every way a run can
// go, at the level of outcome classes: each node is omitted, skipped (a
// guard that may be false, a fan-out over no items), answers the client (a
// responder), succeeds without answering, or fails with a class of HTTP
// statuses; each edge then fires, does not, or may (its condition decided
// three-valued under the predecessor's outcome, celenv.Expr.Decide). A
// run ends well when a node answers or a failure no edge handles ends it
// with that node's error (a declared failure). A walk that reaches the end
// of the graph with neither is a path without an answer: every request
// taking it would get 500 "no node answered the client". Two responders
// that are not ordered and can run in the same walk may race: a warning.
//
// Failure classes group the statuses a node can fail with by what its
// outgoing edges do with them, so the walk stays small: the statuses tried
// are a few generic ones, those node types declare (412), and the literals
// the edges compare with. maxWalks bounds the work per route; past it the
// proof stops and says so in a warning (no workflow shipped comes near).
//
// A walk that had to guess — a guard or an edge condition the facts cannot
// decide, taken both ways — proves nothing about the request that would
// take it: two guards such as `"x" in request.headers` and its negation are
// exclusive, but the walk cannot tell. A path without an answer is an error
// only when some walk reaching it made no such guess; otherwise it is a
// warning naming the undecided guards.

const maxWalks = 200_000

type fireState uint8

const (
	fireNo fireState = iota
	fireYes
	fireMaybe
)

// outClass is one outcome class of a node on a route.
type outClass struct {
	label  string // "412", "timed out", "failed", "" for success
	answer bool   // a responder answering: the run ends
	fail   bool
	out    []fireState // per outgoing edge (w.succ order)
}

type pathWalker struct {
	c       *compiler
	succ    [][]edgeRef
	anc     []graph.Set
	order   []int
	classes [][]outClass
	eidx    [][]int // eidx[i][k]: the number of node i's k-th need
	nedges  int
	format  string
	facts   celenv.Facts // request.format, config vars and the request scenario
	scen    string       // the request scenario, for messages ("" when none)
	walks   int

	unanswered map[int]*unansweredPath // by the last node that ran
	races      map[[2]int]bool
	capped     []string // routes whose walk stopped at maxWalks
}

type unansweredPath struct {
	routes  []string
	path    string
	when    string
	certain bool     // some walk reached it without guessing
	guesses []string // the undecided guards and edges of a guessing walk
}

func (c *compiler) paths(order []int, anc []graph.Set) {
	nodes := c.w.nodes
	succ := make([][]edgeRef, len(nodes))
	for i, n := range nodes {
		for k := range n.needs {
			succ[n.needs[k].from] = append(succ[n.needs[k].from], edgeRef{to: i, k: k})
		}
	}
	pw := &pathWalker{c: c, succ: succ, anc: anc, order: order,
		unanswered: map[int]*unansweredPath{}, races: map[[2]int]bool{}}
	pw.eidx = make([][]int, len(nodes))
	for i, n := range nodes {
		for range n.needs {
			pw.eidx[i] = append(pw.eidx[i], pw.nedges)
			pw.nedges++
		}
	}
	for _, r := range Routes {
		if !c.w.routes[r] {
			continue
		}
		pw.format, pw.walks = r.String(), 0
		base := c.configFacts()
		base["request.format"] = pw.format
		for _, sc := range pw.scenarios(base) {
			pw.facts, pw.scen = sc.facts, sc.desc
			pw.classes = make([][]outClass, len(nodes))
			for i := range nodes {
				pw.classes[i] = pw.outcomeClasses(i)
			}
			st := &walkState{fire: make([]fireState, pw.nedges), label: make([]string, len(nodes)), state: make([]byte, len(nodes))}
			pw.step(0, st)
		}
		if pw.walks > maxWalks {
			pw.capped = append(pw.capped, pw.format)
		}
	}
	if len(pw.capped) > 0 {
		d := c.warnf(RuleUnanswered, "", "the ending proof stopped after %d paths on the %s route(s): paths beyond them were not checked for an answer", maxWalks, strings.Join(pw.capped, " and "))
		d.Hint = "split the workflow, or make guards decidable (compare request fields with literals) so fewer paths branch"
	}
	for _, last := range pw.sortedUnanswered() {
		u := pw.unanswered[last]
		route := strings.Join(u.routes, " and ") + " route"
		if len(u.routes) > 1 {
			route += "s"
		}
		if !u.certain {
			d := c.warnf(RuleUnanswered, c.specs[last].ptr+"/id",
				"a run may end with no answer on the %s%s: the path %s ends at %s, if a request can make %s come out that way (celflow cannot decide them at load; the request would get 500 \"no node answered the client\")",
				route, u.when, u.path, quote(nodes[last].id), strings.Join(u.guesses, " and "))
			d.Hint = "make sure the guards cover every request (an else branch: the negation of the other guard), or add a responder at the end of this path"
			continue
		}
		d := c.errf(RuleUnanswered, c.specs[last].ptr+"/id",
			"a run can end with no answer on the %s%s: the path %s ends at %s, and no node answers the client (the request would get 500 \"no node answered the client\")",
			route, u.when, u.path, quote(nodes[last].id))
		d.Hint = fmt.Sprintf("add a responder after %s (a decode that needs it), or route that outcome to one", quote(nodes[last].id))
	}
	for _, pr := range pw.sortedRaces() {
		a, b := pr[0], pr[1]
		d := c.warnf(RuleRacingResponders, c.specs[b].ptr+"/id",
			"responders %s and %s can run at the same time on some path; the first to answer wins and the other is cancelled", quote(nodes[a].id), quote(nodes[b].id))
		d.Hint = fmt.Sprintf("make %s need %s with an if:, or make their guards exclusive", quote(nodes[b].id), quote(nodes[a].id))
	}
}

// genericStatuses are tried for every node's failures; 0 is a failure
// without an HTTP answer (transport error).
var genericStatuses = []int64{0, 400, 404, 429, 500, 502, 503, 504}

// outcomeClasses computes node i's outcome classes on the current route.
func (pw *pathWalker) outcomeClasses(i int) []outClass {
	n := pw.c.w.nodes[i]
	id := n.id
	// How long the node took is unknown at load; edges that split on it
	// (outcome.duration < duration("1s") and >= it) are tried on each side
	// of every duration they compare with, so that they are seen to
	// exclude each other rather than to race.
	var durs []time.Duration
	for _, er := range pw.succ[i] {
		for _, d := range pw.c.w.nodes[er.to].needs[er.k].cond.DurationLiterals() {
			durs = append(durs, d-time.Nanosecond, d, d+time.Nanosecond)
		}
	}
	slices.Sort(durs)
	durs = slices.Compact(durs)
	facts := func(status string, http int64) []celenv.Facts {
		f := celenv.Facts{"outcome.status": status, "response.status": http, "outcome.response.status": http,
			"nodes." + id + ".status": status, "nodes." + id + ".response.status": http}
		for k, v := range pw.facts {
			f[k] = v
		}
		if len(durs) == 0 {
			return []celenv.Facts{f}
		}
		out := make([]celenv.Facts, 0, len(durs))
		for _, d := range durs {
			g := maps.Clone(f)
			g["outcome.duration"], g["nodes."+id+".duration"] = d, d
			out = append(out, g)
		}
		return out
	}
	outFor := func(f celenv.Facts, success bool) []fireState {
		out := make([]fireState, len(pw.succ[i]))
		for j, er := range pw.succ[i] {
			e := pw.c.w.nodes[er.to].needs[er.k]
			switch {
			case !e.hasIf:
				out[j] = map[bool]fireState{true: fireYes, false: fireNo}[success]
			case e.cond == nil:
				out[j] = fireMaybe // did not compile: errors were reported
			default:
				out[j] = map[celenv.Tri]fireState{celenv.True: fireYes, celenv.False: fireNo, celenv.Unknown: fireMaybe}[e.cond.Decide(f)]
			}
		}
		return out
	}
	var cls []outClass
	if n.contract.Responds {
		cls = append(cls, outClass{answer: true, out: make([]fireState, len(pw.succ[i]))})
	} else {
		for _, f := range facts("succeeded", 200) {
			out := outFor(f, true)
			if !slices.ContainsFunc(cls, func(c outClass) bool { return slices.Equal(c.out, out) }) {
				cls = append(cls, outClass{out: out})
			}
		}
	}
	statuses := slices.Clone(genericStatuses)
	for _, s := range n.contract.Statuses {
		statuses = append(statuses, int64(s))
	}
	for _, er := range pw.succ[i] {
		for _, l := range pw.c.w.nodes[er.to].needs[er.k].cond.IntLiterals() {
			statuses = append(statuses, l-1, l, l+1)
		}
	}
	add := func(label string, fs []celenv.Facts) {
		for _, f := range fs {
			out := outFor(f, false)
			if slices.ContainsFunc(cls, func(c outClass) bool { return c.fail && slices.Equal(c.out, out) }) {
				continue
			}
			cls = append(cls, outClass{label: label, fail: true, out: out})
		}
	}
	add("timed out", facts("timed_out", 0))
	slices.Sort(statuses)
	for _, s := range slices.Compact(statuses) {
		if s == 0 {
			add("failed", facts("failed", 0))
		} else if s >= 300 && s <= 599 { // 2xx is a success, never a failure's status
			add(strconv.FormatInt(s, 10), facts("failed", s))
		}
	}
	return cls
}

// walkState is one partial walk: edge states, and per node what happened
// ('o' omitted, 's' skipped, 'r' ran, 'n' not started after the answer).
type walkState struct {
	fire     []fireState // by pw.eidx
	label    []string
	state    []byte
	answered []int
	guesses  []string // undecided guards and edges this walk took one way
}

func (st *walkState) clone() *walkState {
	return &walkState{fire: slices.Clone(st.fire), label: slices.Clone(st.label),
		state: slices.Clone(st.state), answered: slices.Clone(st.answered), guesses: slices.Clone(st.guesses)}
}

// guess notes an undecided guard or edge the walk took one way.
func (st *walkState) guess(what string) {
	if !slices.Contains(st.guesses, what) {
		st.guesses = append(st.guesses, what)
	}
}

func (pw *pathWalker) step(pos int, st *walkState) {
	if pw.walks > maxWalks {
		return
	}
	if pos == len(pw.order) {
		pw.walks++
		if len(st.answered) == 0 {
			pw.recordUnanswered(st)
		}
		return
	}
	i := pw.order[pos]
	n := pw.c.w.nodes[i]
	for _, a := range st.answered {
		if pw.anc[i].Has(a) { // after the answer: never starts
			st = st.clone()
			st.state[i] = 'n'
			pw.setOut(st, i, nil)
			pw.step(pos+1, st)
			return
		}
	}
	// Resolve incoming edges that may or may not fire, one branch each.
	var maybes []int
	for k := range n.needs {
		if st.fire[pw.eidx[i][k]] == fireMaybe {
			maybes = append(maybes, k)
		}
	}
	for mask := 0; mask < 1<<len(maybes); mask++ {
		s := st
		if len(maybes) > 0 {
			s = st.clone()
			for b, k := range maybes {
				s.fire[pw.eidx[i][k]] = map[bool]fireState{true: fireYes, false: fireNo}[mask&(1<<b) != 0]
				s.guess("the edge " + n.needs[k].label)
			}
		}
		pw.decide(pos, i, s)
	}
}

// decide walks node i's possible outcomes once its incoming edges are known.
func (pw *pathWalker) decide(pos, i int, st *walkState) {
	n := pw.c.w.nodes[i]
	fired := 0
	for k := range n.needs {
		if st.fire[pw.eidx[i][k]] == fireYes {
			fired++
		}
	}
	runs := len(n.needs) == 0 || (n.joinAny && fired > 0) || (!n.joinAny && fired == len(n.needs))
	if !runs {
		st = st.clone()
		st.state[i] = 'o'
		pw.setOut(st, i, nil)
		pw.step(pos+1, st)
		return
	}
	g := n.when.Decide(pw.facts)
	if g == celenv.Unknown && n.when != nil {
		st = st.clone()
		st.guess("the guard of " + quote(n.id))
	}
	if g != celenv.True || n.foreach != nil {
		s := st.clone()
		s.state[i], s.label[i] = 's', "skipped"
		all := make([]fireState, len(pw.succ[i]))
		for j := range all {
			all[j] = fireYes
		}
		pw.setOut(s, i, all)
		pw.step(pos+1, s)
	}
	if g == celenv.False {
		return
	}
	if n.contract.Responds {
		for _, a := range st.answered {
			if !pw.anc[a].Has(i) && !pw.anc[i].Has(a) {
				pw.races[[2]int{min(a, i), max(a, i)}] = true
			}
		}
	}
	for _, cl := range pw.classes[i] {
		s := st.clone()
		s.state[i], s.label[i] = 'r', cl.label
		switch {
		case cl.answer:
			s.answered = append(s.answered, i)
			pw.setOut(s, i, nil)
		case cl.fail:
			// Resolve edges that may fire here: a failure none of whose
			// edges fires is unhandled, and ends the run with its error.
			for _, out := range resolve(cl.out) {
				if !slices.Contains(out, fireYes) {
					pw.walks++ // an unhandled failure: a declared end
					continue
				}
				s2 := s.clone()
				if slices.Contains(cl.out, fireMaybe) {
					s2.guess("the edges from " + quote(n.id))
				}
				pw.setOut(s2, i, out)
				pw.step(pos+1, s2)
			}
			continue
		default:
			pw.setOut(s, i, cl.out)
		}
		pw.step(pos+1, s)
	}
}

// resolve expands the fireMaybe entries of out into every yes/no choice.
func resolve(out []fireState) [][]fireState {
	res := [][]fireState{slices.Clone(out)}
	for j, f := range out {
		if f != fireMaybe {
			continue
		}
		var next [][]fireState
		for _, r := range res {
			y, n := slices.Clone(r), slices.Clone(r)
			y[j], n[j] = fireYes, fireNo
			next = append(next, y, n)
		}
		res = next
	}
	return res
}

func (pw *pathWalker) setOut(st *walkState, i int, out []fireState) {
	for j, er := range pw.succ[i] {
		f := fireNo
		if out != nil {
			f = out[j]
		}
		st.fire[pw.eidx[er.to][er.k]] = f
	}
}

func (pw *pathWalker) recordUnanswered(st *walkState) {
	last := -1
	var names, whens []string
	for _, i := range pw.order {
		n := pw.c.w.nodes[i]
		switch st.state[i] {
		case 'r':
			last = i
			if st.label[i] != "" {
				names = append(names, n.id+" ("+st.label[i]+")")
				whens = append(whens, n.id+" "+map[string]string{"timed out": "times out", "failed": "fails without an HTTP answer"}[st.label[i]])
				if _, err := strconv.Atoi(st.label[i]); err == nil {
					whens[len(whens)-1] = n.id + " fails with " + st.label[i]
				}
			} else {
				names = append(names, n.id)
			}
		case 's':
			names = append(names, n.id+" (skipped)")
			last = i
		}
	}
	if last < 0 {
		return // nothing was even decided: the no-responder and unreachable checks cover it
	}
	u := pw.unanswered[last]
	if u == nil {
		when := ""
		if pw.scen != "" {
			when = " for a request where " + pw.scen
			if len(whens) > 0 {
				when += ","
			}
		}
		if len(whens) > 0 {
			when += " when " + strings.Join(whens, " and ")
		}
		u = &unansweredPath{path: "request → " + strings.Join(names, " → "), when: when}
		pw.unanswered[last] = u
	}
	if !slices.Contains(u.routes, pw.format) {
		u.routes = append(u.routes, pw.format)
	}
	if len(st.guesses) == 0 {
		u.certain = true
	} else if !u.certain && len(u.guesses) == 0 {
		u.guesses = st.guesses
	}
}

func (pw *pathWalker) sortedUnanswered() []int {
	var out []int
	for k := range pw.unanswered {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (pw *pathWalker) sortedRaces() [][2]int {
	var out [][2]int
	for k := range pw.races {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	return out
}

// maxScenarios bounds the request scenarios tried per route.
const maxScenarios = 64

type scenario struct {
	facts celenv.Facts
	desc  string
}

// scenarios are the combinations of request data worth trying on a route:
// the values guards and edge conditions compare request and token fields
// with (celenv.Expr.Atoms), so that exclusive guards are seen to be
// exclusive. Fields beyond maxScenarios combinations stay unknown (both
// ways), which can only add walks, never hide one.
func (pw *pathWalker) scenarios(base celenv.Facts) []scenario {
	atoms := map[string][]any{}
	addAll := func(x *celenv.Expr) {
		for p, vs := range x.Atoms(base) {
			if p == "request.format" {
				continue
			}
			for _, v := range vs {
				if !slices.Contains(atoms[p], v) {
					atoms[p] = append(atoms[p], v)
				}
			}
		}
	}
	for _, n := range pw.c.w.nodes {
		addAll(n.when)
		for _, e := range n.needs {
			addAll(e.cond)
		}
	}
	paths := make([]string, 0, len(atoms))
	for p := range atoms {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	total := 1
	var used []string
	for _, p := range paths {
		if total*len(atoms[p]) > maxScenarios {
			continue
		}
		total *= len(atoms[p])
		used = append(used, p)
	}
	out := []scenario{{facts: base}}
	for _, p := range used {
		var next []scenario
		for _, sc := range out {
			for _, v := range atoms[p] {
				f := make(celenv.Facts, len(sc.facts)+1)
				for k, x := range sc.facts {
					f[k] = x
				}
				f[p] = v
				d := sc.desc
				if d != "" {
					d += " and "
				}
				next = append(next, scenario{facts: f, desc: d + describeFact(p, v, atoms[p])})
			}
		}
		out = next
	}
	return out
}

func describeFact(p string, v any, all []any) string {
	switch x := v.(type) {
	case string:
		if x != celenv.Other {
			return fmt.Sprintf("%s is %q", p, x)
		}
		var lits []string
		for _, a := range all {
			if s, ok := a.(string); ok && s != celenv.Other {
				lits = append(lits, strconv.Quote(s))
			}
		}
		return fmt.Sprintf("%s is none of %s", p, strings.Join(lits, ", "))
	}
	return fmt.Sprintf("%s is %v", p, v)
}

// configFacts are the workflow's vars as facts (config.<name>) for the
// static decisions: ints, strings and bools.
func (c *compiler) configFacts() celenv.Facts {
	f := celenv.Facts{}
	for k, v := range c.vars {
		switch x := v.(type) {
		case json.Number:
			if i, err := x.Int64(); err == nil {
				f["config."+k] = i
			}
		case string, bool:
			f["config."+k] = x
		}
	}
	return f
}
