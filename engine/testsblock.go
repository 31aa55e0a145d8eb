package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
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
}

var expectLists = []string{"ran", "skipped", "omitted", "failed"}

func (c *compiler) tests(root map[string]any) {
	list, _ := root["tests"].([]any)
	for i, raw := range list {
		m, _ := raw.(map[string]any)
		ptr := schema.Ptr("/tests", i)
		tc := testCase{ptr: ptr, probe: Probe{Route: RouteChat}, assume: map[string]Assumption{}}
		tc.name, _ = m["name"].(string)
		if req, ok := m["request"].(map[string]any); ok {
			if s, ok := req["route"].(string); ok {
				tc.probe.Route, _ = ParseRoute(s)
			}
			body := req["body"]
			if body == nil {
				body = map[string]any{}
			}
			tc.probe.Body, _ = json.Marshal(body)
			if h, ok := req["headers"].(map[string]any); ok {
				tc.probe.Headers = http.Header{}
				for k, v := range h {
					if s, ok := v.(string); ok {
						tc.probe.Headers.Add(k, s)
					}
				}
			}
			tc.probe.Tokens, _ = integer(req["tokens"])
		} else {
			tc.probe.Body = []byte(`{}`)
		}
		if !c.w.routes[tc.probe.Route] {
			c.errf(RuleTestRoute, ptr+"/request/route", "the workflow does not serve the %s route", tc.probe.Route)
		}
		if as, ok := m["assume"].(map[string]any); ok {
			for _, id := range c.doc.Keys(ptr + "/assume") {
				if _, ok := c.ids[id]; !ok {
					c.ds = append(c.ds, c.doc.DiagKey(schema.Ptr(ptr, "assume", id), schema.Error, "assume names unknown node "+quote(id)).R(RuleTestNode))
					continue
				}
				var s string
				switch v := as[id].(type) {
				case json.Number:
					s = v.String()
				case string:
					s = v
				}
				if a, err := ParseAssumption(s); err == nil {
					tc.assume[id] = a
				}
			}
		}
		ex, _ := m["expect"].(map[string]any)
		tc.expect.lists = map[string][]string{}
		for _, k := range expectLists {
			l, ok := ex[k].([]any)
			if !ok {
				continue
			}
			ids := []string{}
			for j, v := range l {
				s, _ := v.(string)
				if _, ok := c.ids[s]; !ok {
					c.errf(RuleTestNode, schema.Ptr(ptr, "expect", k, j), "expect names unknown node %s", quote(s))
				}
				ids = append(ids, s)
			}
			tc.expect.lists[k] = ids
		}
		if s, ok := ex["answered_by"].(string); ok {
			tc.expect.answeredBy = &s
		}
		tc.expect.status, _ = integer(ex["status"])
		if s, ok := ex["code"].(string); ok {
			tc.expect.code = &s
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
	status, code := 200, ""
	if rep.Err != nil && !rep.Answered {
		status, code = rep.Err.HTTPStatus(), rep.Err.Code()
	}
	if tc.expect.status != 0 && tc.expect.status != status {
		msgs = append(msgs, fmt.Sprintf("status: got %d, want %d", status, tc.expect.status))
	}
	if tc.expect.code != nil && *tc.expect.code != code {
		msgs = append(msgs, fmt.Sprintf("code: got %s, want %s", quote(code), quote(*tc.expect.code)))
	}
	return msgs
}
