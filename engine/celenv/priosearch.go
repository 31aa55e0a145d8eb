package celenv

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// The admission priority's counterexample search: the workflow search's
// (engine/search.go) over what a priority can read, the request line and
// headers. The front evaluates a priority with celenv.Request{ID, Format,
// Path, Header} (cmd/internal/server/front/admission.go); so does the
// search, for each route and each header the expression reads absent,
// empty, malformed and at the values its literals suggest (x-request-id
// when it reads request.id: the front's id is the client's when valid).

// RuleMayFail is the searches' rule id (engine.RuleCELMayFail, defined
// with the engine's rules).
const RuleMayFail = "cel/may-fail"

// PriorityFinding is the first request that makes a priority fail.
type PriorityFinding struct {
	Line, Col int    // in the expression, as Issue
	Err       string // the evaluation error
	Request   string // the request, written compactly
	Hint      string // a fix
}

// prioritySearchBound caps the requests tried (never near for a priority:
// a few headers).
const prioritySearchBound = 20000

// ProbeID is the searches' request.id when the client sends no valid
// x-request-id (the front draws a UUID: one of its shape, fixed, so a
// search reports the same on every load).
const ProbeID = "00000000-0000-4000-8000-000000000000"

// Counterexample returns the first request, in a fixed order (simplest
// first), whose priority evaluation fails; nil when none does.
func (p *Priority) Counterexample() *PriorityFinding {
	a := p.ast.NativeRep()
	var headers, strs, seps []string
	var ints []int64
	readsID := false
	celast.PreOrderVisit(a.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			s := e.AsSelect()
			switch path(s.Operand()) {
			case "request.headers":
				headers = addUnique(headers, s.FieldName())
			case "request":
				if s.FieldName() == "id" {
					readsID = true
				}
			}
		case celast.LiteralKind:
			switch v := e.AsLiteral().(type) {
			case types.String:
				strs = addUnique(strs, string(v))
			case types.Int:
				ints = append(ints, int64(v))
			}
		case celast.CallKind:
			c := e.AsCall()
			args := c.Args()
			switch c.FunctionName() {
			case operators.Index, operators.OptIndex:
				if path(args[0]) == "request.headers" {
					if k, ok := args[1].AsLiteral().(types.String); ok && args[1].Kind() == celast.LiteralKind {
						headers = addUnique(headers, string(k))
					} else {
						headers = addUnique(headers, "x-probe")
					}
				}
			case operators.In:
				if path(args[1]) == "request.headers" {
					if k, ok := args[0].AsLiteral().(types.String); ok && args[0].Kind() == celast.LiteralKind {
						headers = addUnique(headers, string(k))
					}
				}
			case "split":
				if len(args) > 0 {
					if s, ok := args[0].AsLiteral().(types.String); ok && args[0].Kind() == celast.LiteralKind {
						seps = addUnique(seps, string(s))
					}
				}
			}
		}
	}))
	if readsID {
		headers = addUnique(headers, "x-request-id")
	}
	vals := ProbeValues(strs, ints, seps, nil)
	routes := [][2]string{{"chat", "/v1/chat/completions"}, {"completions", "/v1/completions"}, {"generate", "/inference/v1/generate"}}
	ns := []int{len(routes)}
	for range headers {
		ns = append(ns, len(vals))
	}
	prog, err := p.env.Program(p.ast, cel.EvalOptions(cel.OptTrackState))
	if err != nil {
		return nil
	}
	var found *PriorityFinding
	tried := 0
	Enumerate(ns, func(idx []int) bool {
		if tried++; tried > prioritySearchBound {
			return false
		}
		h := http.Header{}
		desc := []string{"POST " + routes[idx[0]][1]}
		for d, name := range headers {
			v := vals[idx[d+1]]
			if v != nil {
				h.Set(name, *v)
			}
			desc = append(desc, HeaderDesc(name, v))
		}
		id := ProbeID
		if v := h.Get("X-Request-Id"); v != "" {
			id = v
		}
		r := &Request{ID: id, Format: routes[idx[0]][0], Path: routes[idx[0]][1], Header: h}
		if _, err := p.Eval(r); err == nil {
			return true
		}
		line, col, node, ok := locate(prog, a, prioActivation{r})
		if !ok {
			line, col = 1, 0
		}
		_, err := p.Eval(r)
		found = &PriorityFinding{Line: line, Col: col, Err: err.Error(), Request: strings.Join(desc, ", "), Hint: FixHint(a, node)}
		return false
	})
	return found
}

func addUnique(l []string, s string) []string {
	if slices.Contains(l, s) {
		return l
	}
	return append(l, s)
}

// probeStrings are header values tried beside absent and the expression's
// own: empty, malformed for every conversion, and one well-formed value of
// each conversion.
var probeStrings = []string{"", "?!", "0", "1", "-1", "1s", "2026-01-01T00:00:00Z", "true"}

// ProbeValues are the values a header is tried at, absent (nil) first:
// probeStrings, the expression's string literals, its int literals and
// their neighbours, text with 0 to 3 of each split separator, and extra
// (the vars' strings), each once and only as a client can send it.
func ProbeValues(strs []string, ints []int64, seps, extra []string) []*string {
	vals := []*string{nil}
	seen := map[string]bool{}
	add := func(v string) {
		if !seen[v] && validHeaderValue(v) {
			seen[v] = true
			vals = append(vals, &v)
		}
	}
	for _, v := range probeStrings {
		add(v)
	}
	for _, v := range strs {
		add(v)
	}
	for _, n := range IntNeighbours(ints) {
		add(strconv.FormatInt(n, 10))
	}
	for _, sep := range seps {
		if sep == "" {
			continue
		}
		parts := []string{"a", "b", "c", "d"}
		for k := 1; k <= len(parts); k++ {
			add(strings.Join(parts[:k], sep))
		}
	}
	for _, v := range extra {
		add(v)
	}
	return vals
}

// IntNeighbours are n-1, n and n+1 of each literal, each once.
func IntNeighbours(ints []int64) []int64 {
	var out []int64
	for _, n := range ints {
		for _, v := range []int64{n - 1, n, n + 1} {
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	return out
}

// validHeaderValue: what a client can send as a header value (net/http
// refuses control characters; surrounding space is trimmed).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return strings.TrimSpace(v) == v
}

// HeaderDesc writes one header of a generated request.
func HeaderDesc(name string, v *string) string {
	if v == nil {
		return name + " absent"
	}
	return name + ": " + strconv.Quote(*v)
}
