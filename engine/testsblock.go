package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/celflow/celflow/schema"
)

// testCase is one entry of a workflow's `tests:` block: a request, the
// assumed node results, and the path the request must take.
type testCase struct {
	name, ptr string
	probe     Probe
	assume    map[string]Assumption
	expect    expectation
}

type expectation struct {
	lists      map[string][]string // ran, skipped, omitted, failed (absent: not checked)
	answeredBy *string
	status     int
	code       *string
	attempts   map[string]int // node → attempts made
	targets    map[string]int // node → index of the target rule chosen, -1 for none
}

var expectLists = []string{"ran", "skipped", "omitted", "failed"}

func (c *compiler) tests(list []testDoc) {
	for i := range list {
		td := &list[i]
		ptr := td.Ptr
		tc := testCase{ptr: ptr, name: td.Name.V, probe: Probe{Route: RouteChat, Body: []byte(`{}`)}, assume: map[string]Assumption{}}
		if req := td.Request; req != nil {
			if req.Route.Set {
				tc.probe.Route, _ = ParseRoute(req.Route.V)
			}
			if req.Body.Set && req.Body.V != nil {
				tc.probe.Body, _ = json.Marshal(req.Body.V)
			}
			if req.Headers.Set {
				tc.probe.Headers = http.Header{}
				for k, v := range req.Headers.V {
					tc.probe.Headers.Add(k, v)
				}
			}
			tc.probe.Tokens = req.Tokens.V
		}
		if !c.w.routes[tc.probe.Route] {
			c.errf(RuleTestRoute, ptr+"/request/route", "the workflow does not serve the %s route", tc.probe.Route)
		}
		for _, e := range td.Assume {
			if _, ok := c.ids[e.Key]; !ok {
				c.ds = append(c.ds, c.doc.DiagKey(e.KeyPos.Ptr, schema.Error, "assume names unknown node "+quote(e.Key)).R(RuleTestNode))
				continue
			}
			if a, err := assumptionOf(e.V.V); err == nil {
				tc.assume[e.Key] = a
			}
		}
		tc.expect.lists = map[string][]string{}
		if ex := td.Expect; ex != nil {
			for _, k := range expectLists {
				l, ok := ex.list(k)
				if !ok {
					continue
				}
				ids := []string{}
				for _, v := range l {
					if _, ok := c.ids[v.V]; !ok {
						c.errf(RuleTestNode, v.Ptr, "expect names unknown node %s", quote(v.V))
					}
					ids = append(ids, v.V)
				}
				tc.expect.lists[k] = ids
			}
			if ex.AnsweredBy.Set {
				tc.expect.answeredBy = &ex.AnsweredBy.V
			}
			tc.expect.status = ex.Status.V
			if ex.Code.Set {
				tc.expect.code = &ex.Code.V
			}
			for _, e := range ex.Attempts {
				if c.expectNode(e.KeyPos.Ptr, e.Key) {
					if tc.expect.attempts == nil {
						tc.expect.attempts = map[string]int{}
					}
					tc.expect.attempts[e.Key] = e.V.V
				}
			}
			for _, e := range ex.Targets {
				if !c.expectNode(e.KeyPos.Ptr, e.Key) {
					continue
				}
				k := -1
				if n, ok := e.V.V.(json.Number); ok {
					i, _ := n.Int64()
					k = int(i)
					if j := c.ids[e.Key]; k >= len(c.specs[j].targets) {
						c.errf(RuleTestNode, e.KeyPos.Ptr, "node %s has %d target rules; expect names rule %d", quote(e.Key), len(c.specs[j].targets), k)
					}
				}
				if tc.expect.targets == nil {
					tc.expect.targets = map[string]int{}
				}
				tc.expect.targets[e.Key] = k
			}
		}
		c.w.tests = append(c.w.tests, tc)
	}
}

// TestCount is the number of entries in the workflow's tests: block.
func (w *Workflow) TestCount() int { return len(w.tests) }

// RunTests runs the workflow's tests: block through Explain and returns one
// diagnostic per failed test, at the test's position.
func (w *Workflow) RunTests(ctx context.Context) schema.Diagnostics {
	var ds schema.Diagnostics
	for _, tc := range w.tests {
		rep, err := w.Explain(ctx, tc.probe, tc.assume)
		if r, ok := errors.AsType[*Refused](err); ok {
			rep, err = &Report{Err: r.Err}, nil // serve's answer at entry: the test checks it
		}
		if err != nil {
			ds = append(ds, w.doc.Diag(tc.ptr, schema.Error, fmt.Sprintf("test %s: %v", quote(tc.name), err)).R(RuleTestFailed))
			continue
		}
		for _, msg := range tc.check(rep) {
			ds = append(ds, w.doc.Diag(tc.ptr, schema.Error, fmt.Sprintf("test %s: %s", quote(tc.name), msg)).R(RuleTestFailed))
		}
	}
	return ds.Sort()
}

func (tc *testCase) check(rep *Report) []string {
	got := map[string][]string{}
	for _, k := range expectLists {
		got[k] = []string{}
	}
	answered := ""
	for _, o := range rep.Outcomes {
		switch o.Status {
		case StatusSucceeded:
			got["ran"] = append(got["ran"], o.Node)
		case StatusFailed, StatusTimedOut:
			got["ran"] = append(got["ran"], o.Node)
			got["failed"] = append(got["failed"], o.Node)
		case StatusSkipped:
			got["skipped"] = append(got["skipped"], o.Node)
		case StatusOmitted:
			got["omitted"] = append(got["omitted"], o.Node)
		}
		if o.Responded {
			answered = o.Node
		}
	}
	var msgs []string
	for _, k := range expectLists {
		want, ok := tc.expect.lists[k]
		if !ok {
			continue
		}
		w, g := slices.Clone(want), got[k]
		slices.Sort(w)
		gs := slices.Clone(g)
		slices.Sort(gs)
		if !slices.Equal(w, gs) {
			msgs = append(msgs, fmt.Sprintf("%s: got [%s], want [%s]", k, strings.Join(g, ", "), strings.Join(want, ", ")))
		}
	}
	if tc.expect.answeredBy != nil && *tc.expect.answeredBy != answered {
		msgs = append(msgs, fmt.Sprintf("answered_by: got %s, want %s", quote(answered), quote(*tc.expect.answeredBy)))
	}
	// The status the client gets, as serve writes it: the answering node's
	// own (an async-broker's 202), else the error's.
	status, code := 200, ""
	switch {
	case rep.Err != nil && !rep.Answered:
		status, code = rep.Err.HTTPStatus(), rep.Err.Code()
	case rep.Answered:
		for _, o := range rep.Outcomes {
			if o.Responded && o.HTTPStatus != 0 {
				status = o.HTTPStatus
			}
		}
	}
	if tc.expect.status != 0 && tc.expect.status != status {
		msgs = append(msgs, fmt.Sprintf("status: got %d, want %d", status, tc.expect.status))
	}
	if tc.expect.code != nil && *tc.expect.code != code {
		msgs = append(msgs, fmt.Sprintf("code: got %s, want %s", quote(code), quote(*tc.expect.code)))
	}
	for _, o := range rep.Outcomes {
		if want, ok := tc.expect.attempts[o.Node]; ok && o.Attempt != want {
			msgs = append(msgs, fmt.Sprintf("attempts of %s: got %d, want %d", o.Node, o.Attempt, want))
		}
		if want, ok := tc.expect.targets[o.Node]; ok {
			got := -1
			if o.Target != nil {
				got = o.Target.Rule
			}
			if got != want {
				msgs = append(msgs, fmt.Sprintf("target of %s: got %s, want %s", o.Node, ruleName(got), ruleName(want)))
			}
		}
	}
	return msgs
}

func ruleName(k int) string {
	if k < 0 {
		return "none"
	}
	return "rule " + strconv.Itoa(k)
}

// expectNode reports whether id names a node, reporting it at ptr if not.
func (c *compiler) expectNode(ptr, id string) bool {
	if _, ok := c.ids[id]; ok {
		return true
	}
	c.ds = append(c.ds, c.doc.DiagKey(ptr, schema.Error, "expect names unknown node "+quote(id)).R(RuleTestNode))
	return false
}

// assumptionOf reads a tests: assume value (already schema-valid): a
// status or word; a list of them, one per attempt; or {items: [...]}, one
// per fan-out item, each a status, a word or a list per attempt.
func assumptionOf(v any) (Assumption, error) {
	switch x := v.(type) {
	case json.Number:
		return ParseAssumption(x.String())
	case string:
		return ParseAssumption(x)
	case []any:
		var a Assumption
		for _, e := range x {
			y, err := assumptionOf(e)
			if err != nil {
				return Assumption{}, err
			}
			a.Attempts = append(a.Attempts, y)
		}
		return a, nil
	case map[string]any:
		items, _ := x["items"].([]any)
		var a Assumption
		for _, e := range items {
			y, err := assumptionOf(e)
			if err != nil {
				return Assumption{}, err
			}
			a.Items = append(a.Items, y)
		}
		return a, nil
	}
	return Assumption{}, fmt.Errorf("unsupported assumption %v", v)
}
