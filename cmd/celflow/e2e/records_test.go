//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	simlib "github.com/celflow/celflow/cmd/internal/sim"
)

// obj is a decoded JSON object (numbers as json.Number).
type obj = map[string]any

// leg is one request a simulated worker received.
type leg struct {
	simlib.Record
	body obj // nil when the body is not a JSON object
}

// records returns the records of s whose x-request-id is id, once each of
// them is complete (bounded wait: the worker finishes its record just after
// the reply's last byte).
func (st *stack) records(s *simProc, id string) []simlib.Record {
	st.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		page, err := simlib.FetchRecords(ctx, s.url, 0)
		cancel()
		if err != nil {
			st.t.Fatalf("records of %s: %v", s.name, err)
		}
		var out []simlib.Record
		done := true
		for _, r := range page.Records {
			if hasValue(r.Headers.Values("X-Request-Id"), id) {
				out = append(out, r)
				done = done && r.Done
			}
		}
		if done || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasValue(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// legs returns what every worker (not the gateway) received for request id,
// in arrival order.
func (st *stack) legs(id string) []leg {
	st.t.Helper()
	var out []leg
	for _, r := range roles {
		for _, rec := range st.records(st.workers[r], id) {
			l := leg{Record: rec}
			d := json.NewDecoder(strings.NewReader(rec.Body))
			d.UseNumber()
			var m obj
			if d.Decode(&m) == nil {
				l.body = m
			}
			out = append(out, l)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// of returns the legs a worker received.
func of(legs []leg, worker string) []leg {
	var out []leg
	for _, l := range legs {
		if l.Worker == worker {
			out = append(out, l)
		}
	}
	return out
}

// one returns the single leg a worker received, failing otherwise.
func one(t *testing.T, legs []leg, worker string) leg {
	t.Helper()
	ls := of(legs, worker)
	if len(ls) != 1 {
		t.Fatalf("%s received %d legs, want 1:\n%s", worker, len(ls), describe(legs))
	}
	return ls[0]
}

func describe(legs []leg) string {
	var b strings.Builder
	for _, l := range legs {
		fmt.Fprintf(&b, "  %s %s %s EPP-Profile=%q Prefer=%q status=%d cancelled=%v\n", l.Worker, l.Method, l.Path,
			l.Headers.Get("Epp-Profile"), l.Headers.Get("Prefer"), l.Status, l.Cancelled)
	}
	return b.String()
}

// get walks a decoded JSON value by a dotted path ("tokens.token_ids.0").
func get(v any, path string) (any, bool) {
	if path == "" {
		return v, true
	}
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case obj:
			var ok bool
			if v, ok = x[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// shape checks one leg against the wire contract; every problem is
// reported with the leg's identity.
type shape struct {
	t   *testing.T
	leg leg
	id  string // what the leg is, for messages
}

func check(t *testing.T, l leg, what string) *shape {
	t.Helper()
	if l.body == nil {
		t.Errorf("%s (%s %s): body is not a JSON object: %.200s", what, l.Worker, l.Path, l.Body)
	}
	return &shape{t: t, leg: l, id: what}
}

func (s *shape) fail(format string, args ...any) {
	s.t.Helper()
	s.t.Errorf("%s (%s %s): %s\n  body: %.600s", s.id, s.leg.Worker, s.leg.Path, fmt.Sprintf(format, args...), s.leg.Body)
}

// path asserts the leg's URL path.
func (s *shape) path(want string) *shape {
	s.t.Helper()
	if s.leg.Path != want {
		s.fail("path %s, want %s", s.leg.Path, want)
	}
	return s
}

// header asserts that name has exactly the values want (none when empty).
func (s *shape) header(name string, want ...string) *shape {
	s.t.Helper()
	got := s.leg.Headers.Values(name)
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		s.fail("header %s: %q, want %q", name, got, want)
	}
	return s
}

// eq asserts that path holds want, compared as JSON text.
func (s *shape) eq(path string, want any) *shape {
	s.t.Helper()
	got, ok := get(s.leg.body, path)
	if !ok {
		s.fail("%s is absent, want %s", path, js(want))
		return s
	}
	if js(got) != js(want) {
		s.fail("%s = %s, want %s", path, js(got), js(want))
	}
	return s
}

func (s *shape) absent(paths ...string) *shape {
	s.t.Helper()
	for _, p := range paths {
		if v, ok := get(s.leg.body, p); ok {
			s.fail("%s must be absent, got %s", p, js(v))
		}
	}
	return s
}

func (s *shape) present(paths ...string) *shape {
	s.t.Helper()
	for _, p := range paths {
		if _, ok := get(s.leg.body, p); !ok {
			s.fail("%s is absent", p)
		}
	}
	return s
}

// ints asserts that path is a non-empty array of non-negative integers and
// returns it.
func (s *shape) ints(path string) []int64 {
	s.t.Helper()
	v, _ := get(s.leg.body, path)
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		s.fail("%s = %s, want a non-empty integer array", path, js(v))
		return nil
	}
	out := make([]int64, len(arr))
	for i, e := range arr {
		n, ok := e.(json.Number)
		x, err := n.Int64()
		if !ok || err != nil || x < 0 {
			s.fail("%s[%d] = %s, want a non-negative integer", path, i, js(e))
			return nil
		}
		out[i] = x
	}
	return out
}

// strs returns the string array at path (nil when it is not one).
func (s *shape) strs(path string) []string {
	v, _ := get(s.leg.body, path)
	arr, _ := v.([]any)
	var out []string
	for _, e := range arr {
		if x, ok := e.(string); ok {
			out = append(out, x)
		}
	}
	return out
}

// js is v as compact JSON (json.Number keeps its spelling).
func js(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSpace(b.String())
}
