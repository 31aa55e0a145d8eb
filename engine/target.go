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

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// LegTarget is where one node's legs go and what they carry beyond the
// node type's own choices, as the node's `target:` rules decided for one
// request: the first rule whose `if` holds (a rule without `if` always
// does). Node types that call a worker pool apply it (nodes/internal/leg).
// It is compiled at load and shared by every request: read-only.
type LegTarget struct {
	Rule int // index of the rule in the node's target list
	// Pool is a named pool (upstream.pools.<name>, direct mode; in gateway
	// mode the legs carry it in a header the leg stamps, nodes/internal/leg);
	// "" keeps the role's.
	Pool string
	// Model is the new value of the body's "model" as a JSON string, spliced
	// over the client's on this node's legs; nil keeps it.
	Model []byte
	// Header is set on every leg of the node after celflow's own headers,
	// replacing any of the same name (EPP-Profile included); nil for none.
	Header http.Header
	// Desc is the rule as explain and spans show it: `target[0]: pool
	// decode-70b, model "m-fp8", headers x-llm-d-inference-objective`.
	Desc string
	// Timeout replaces the node's per-attempt timeout (its `timeout`, or
	// defaults.timeout) for this request; 0 is none. nil keeps the node's.
	// The scheduler applies it.
	Timeout *time.Duration
	// TTFB replaces the legs' ttfb_timeout (the wait for the response
	// headers; 0 is none), StreamIdle a relaying node's stream_idle_timeout
	// (the longest silence between two relayed chunks; 0 is none); nil
	// keeps the node's params. The legs apply them (nodes/internal/leg).
	TTFB, StreamIdle *time.Duration
	// Drop is every header any of the node's rules sets (canonical names):
	// the client's value of those never reaches the node's legs, whichever
	// rule matched or none (Rule -1), so a rule that does not fire cannot
	// let a client choose, say, the scheduling profile.
	Drop []string
}

// targetRule is one compiled entry of a node's `target:` list.
type targetRule struct {
	cond *celenv.Expr // nil: always
	sel  LegTarget
	// none is what a request that no rule matches gets: Rule -1, only Drop
	// (shared by every rule of the node; nil when the rules set no header).
	none *LegTarget
}

// targetSpec is one rule as the document gives it.
type targetSpec struct {
	ptr, cond, pool, model    string
	headers                   map[string]string
	headerOrder               []string
	timeout, ttfb, streamIdle *time.Duration
}

// reservedLegHeaders are headers a target rule may not set: the transport's
// (framing, host, hop-by-hop), the request id, trace context, and the pool
// header, which `pool` sets. Canonical names.
var reservedLegHeaders = map[string]string{
	"Content-Length":    "celflow frames the body",
	"Content-Type":      "celflow frames the body",
	"Transfer-Encoding": "celflow frames the body",
	"Host":              "the target decides the host",
	"Connection":        "a hop-by-hop header",
	"Keep-Alive":        "a hop-by-hop header",
	"Te":                "a hop-by-hop header",
	"Trailer":           "a hop-by-hop header",
	"Upgrade":           "a hop-by-hop header",
	"X-Request-Id":      "every leg carries the canonical request id",
	"Traceparent":       "the node's span sets the trace context",
	"Tracestate":        "the node's span sets the trace context",
	"X-Celflow-Pool":    "`pool` sets it",
}

// targetRoles are the roles (Contract.Role) whose legs go to a pool; only
// nodes of these roles may have target rules.
var targetRoles = []string{"encode", "prefill", "decode"}

// Pools is what the compiler checks a target rule's pool against: the serve
// config's upstream section (*upstream.Client implements it). Nil in plain
// validate, where nothing is known.
type Pools interface {
	// HasPool reports whether a leg can go to the named pool (in gateway
	// mode always: the gateway routes by the pool header).
	HasPool(name string) bool
	// PoolNames lists the known pools, sorted, for diagnostics.
	PoolNames() []string
}

// pools is what target rules are checked against: LoadOptions.Pools, else
// the upstream client the nodes build with (every caller that sets it
// gets the check, as before Pools existed).
func (o *LoadOptions) pools() Pools {
	if o.Pools != nil {
		return o.Pools
	}
	return o.upstream()
}

// parseTargets reads a node's typed `target:` list (already schema-valid).
func parseTargets(docs []targetDoc) []targetSpec {
	if len(docs) == 0 {
		return nil
	}
	out := make([]targetSpec, 0, len(docs))
	for _, d := range docs {
		ts := targetSpec{ptr: d.Ptr, cond: d.If.V, pool: d.Pool.V, model: d.Model.V}
		for _, v := range []struct {
			val *schema.Val[time.Duration]
			dst **time.Duration
		}{{&d.Timeout, &ts.timeout}, {&d.TTFBTimeout, &ts.ttfb}, {&d.StreamIdleTimeout, &ts.streamIdle}} {
			if v.val.Set {
				t := v.val.V
				*v.dst = &t
			}
		}
		for _, h := range d.Headers {
			if ts.headers == nil {
				ts.headers = map[string]string{}
			}
			ts.headers[h.Key] = h.V.V
			ts.headerOrder = append(ts.headerOrder, h.Key)
		}
		sort.Strings(ts.headerOrder)
		out = append(out, ts)
	}
	return out
}

// compileTargets compiles node i's target rules: conditions as guards, the
// pool checked against the upstream pools when the compiler has them
// (serve, validate --config), headers checked and canonicalised, the model
// encoded once.
func (c *compiler) compileTargets(i int, specs []targetSpec) []targetRule {
	if len(specs) == 0 {
		return nil
	}
	n := c.w.nodes[i]
	sp := &c.specs[i]
	if n.node == nil {
		return nil // the node did not build; its own errors are reported
	}
	role := n.contract.Role
	if !slices.Contains(targetRoles, role) {
		c.errf(RuleTargetPlacement, sp.ptr+"/target", "target rules choose where a worker leg goes; node type %s sends none (conditional-decode, encode, prefill and decode nodes take target rules)", quote(n.typ))
		return nil
	}
	rules := make([]targetRule, 0, len(specs))
	for k, ts := range specs {
		r := targetRule{sel: LegTarget{Rule: k, Pool: ts.pool}}
		if ts.cond != "" {
			r.cond = c.expr(ts.ptr+"/if", ts.cond, celenv.Guard)
		} else if k < len(specs)-1 {
			c.errf(RuleTargetOrder, ts.ptr, "a rule without `if` always matches, so the %d rule(s) after it can never be chosen (move it last, or give it an if)", len(specs)-1-k)
		}
		if ts.pool != "" {
			if n.contract.SharedEndpoint {
				c.errf(RuleTargetPlacement, ts.ptr+"/pool", "this %s node draws its endpoint once per request for every node that shares it (the concurrent kv-sglang session names one prefill host on both legs), so a target rule cannot choose its pool; route by headers or model here, or use the sequential shape", n.typ)
			} else {
				c.checkPool(ts.ptr+"/pool", ts.pool, role)
			}
		}
		if ts.model != "" {
			r.sel.Model, _ = json.Marshal(ts.model)
		}
		r.sel.Timeout, r.sel.TTFB, r.sel.StreamIdle = ts.timeout, ts.ttfb, ts.streamIdle
		if ts.streamIdle != nil && !(n.contract.Responds && role == "decode") {
			d := c.errf(RuleTargetPlacement, ts.ptr+"/stream_idle_timeout", "stream_idle_timeout bounds the silence between chunks of a reply relayed to the client; node type %s relays none (decode and conditional-decode do)", quote(n.typ))
			d.Hint = "bound this node's legs with timeout or ttfb_timeout; stream_idle_timeout belongs in the rules of a decode or conditional-decode node"
		}
		for _, name := range ts.headerOrder {
			hp := schema.Ptr(ts.ptr, "headers", name)
			if name != strings.ToLower(name) {
				c.ds = append(c.ds, c.doc.DiagKey(hp, schema.Error, fmt.Sprintf("header names are written in lower case (%s); HTTP header names are case-insensitive and celflow lowercases them", quote(strings.ToLower(name)))).R(RuleTargetHeader))
				continue
			}
			ck := http.CanonicalHeaderKey(name)
			if why, bad := reservedLegHeaders[ck]; bad {
				c.ds = append(c.ds, c.doc.DiagKey(hp, schema.Error, fmt.Sprintf("a target rule cannot set %s: %s", name, why)).R(RuleTargetHeader))
				continue
			}
			if r.sel.Header == nil {
				r.sel.Header = http.Header{}
			}
			r.sel.Header[ck] = []string{ts.headers[name]}
		}
		r.sel.Desc = describeTarget(k, &r.sel, ts.headerOrder)
		rules = append(rules, r)
	}
	var drop []string
	for _, r := range rules {
		for h := range r.sel.Header {
			if !slices.Contains(drop, h) {
				drop = append(drop, h)
			}
		}
	}
	if len(drop) > 0 {
		sort.Strings(drop)
		none := &LegTarget{Rule: -1, Drop: drop}
		for k := range rules {
			rules[k].sel.Drop, rules[k].none = drop, none
		}
	}
	return rules
}

// checkPool reports a pool the upstream section does not have (direct
// mode). Without an upstream client (plain validate) nothing is known.
func (c *compiler) checkPool(ptr, name, role string) {
	up := c.opts.pools()
	if up == nil || up.HasPool(name) {
		return
	}
	names := up.PoolNames()
	msg := "no pool named " + quote(name) + " in upstream.pools"
	if s := closestName(name, names); s != "" {
		msg += " (did you mean " + quote(s) + "?)"
	}
	if len(names) > 0 {
		msg += "; pools: " + strings.Join(names, ", ")
	}
	c.errf(RuleTargetPool, ptr, "%s (the %s legs of this node would have nowhere to go)", msg, role)
}

func describeTarget(k int, t *LegTarget, headers []string) string {
	var parts []string
	if t.Pool != "" {
		parts = append(parts, "pool "+t.Pool)
	}
	if t.Model != nil {
		parts = append(parts, "model "+string(t.Model))
	}
	if len(headers) > 0 {
		parts = append(parts, "headers "+strings.Join(headers, ", "))
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{{"timeout", t.Timeout}, {"ttfb_timeout", t.TTFB}, {"stream_idle_timeout", t.StreamIdle}} {
		if d.v != nil {
			parts = append(parts, d.name+" "+d.v.String())
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "defaults")
	}
	return "target[" + strconv.Itoa(k) + "]: " + strings.Join(parts, ", ")
}

// chooseTarget evaluates node i's rules with the run's activation; nil
// when none matched (the node type's defaults apply). A rule whose if:
// fails at run time does not match under on_cel_error: safe; under fail
// the error is returned.
func (rs *run) chooseTarget(i int, n *cnode) (*LegTarget, error) {
	for k := range n.targets {
		r := &n.targets[k]
		if r.cond != nil {
			ok, err := r.cond.Bool(rs.act)
			if err != nil {
				expr := "target[" + strconv.Itoa(k) + "].if"
				if rs.celError(i, expr, err) {
					return nil, fmt.Errorf("%s %s: %w", expr, r.cond.Src, err)
				}
				continue
			}
			if !ok {
				continue
			}
		}
		return &r.sel, nil
	}
	if len(n.targets) > 0 {
		return n.targets[0].none, nil // nil when the rules set no header
	}
	return nil, nil
}
