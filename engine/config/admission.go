package config

import (
	"time"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// Admission is the `admission:` section (engine/admission, docs/operations.md).
// It is off (Enabled false) unless a bound is set.
type Admission struct {
	MaxInFlight  int
	Routes       map[string]int // "chat", "completions", "generate" → bound (0: none)
	MaxQueue     int
	QueueTimeout time.Duration
	RetryAfter   time.Duration
	// Priority is the compiled admission.priority, nil when unset.
	Priority *celenv.Priority
}

// Enabled: some bound is set.
func (a Admission) Enabled() bool {
	if a.MaxInFlight > 0 {
		return true
	}
	for _, n := range a.Routes {
		if n > 0 {
			return true
		}
	}
	return false
}

// Admission defaults: no bound (off), no queue, a 5 s wait, Retry-After 1 s.
const (
	DefaultQueueTimeout = 5 * time.Second
	DefaultRetryAfter   = time.Second
)

var admissionRoutes = []string{"chat", "completions", "generate"}

// checkAdmission compiles admission.priority (its errors point into the
// expression) and refuses settings that would do nothing: a queue or a
// priority without a bound, a queue that cannot wait.
func (c *Config) checkAdmission() schema.Diagnostics {
	var ds schema.Diagnostics
	d := c.doc
	if src, ok := d.Value("/admission/priority"); ok {
		if s, ok := src.(string); ok && s != "" {
			p, iss := celenv.CompilePriority(s)
			for _, is := range iss {
				line, col := d.ScalarPos("/admission/priority", is.Line, is.Col)
				ds = append(ds, schema.Diagnostic{File: d.File, Line: line, Col: col,
					Path: d.Path("/admission/priority"), Msg: is.Msg, Severity: schema.Error, Rule: schema.RuleAdmission})
			}
			c.prio = p
		}
	}
	a := decodeAdmission(values{d})
	if !a.Enabled() {
		for _, k := range []string{"/admission/max_queue", "/admission/priority"} {
			if x, ok := d.Value(k); ok && !isZero(x) {
				ds = append(ds, d.Diag(k, schema.Error,
					"has no effect without a bound: set admission.max_in_flight or admission.routes.<route> above 0").R(schema.RuleAdmission))
			}
		}
	}
	if a.MaxQueue > 0 && a.QueueTimeout <= 0 {
		ptr := "/admission/queue_timeout"
		if !d.Has(ptr) {
			ptr = "/admission/max_queue"
		}
		ds = append(ds, d.Diag(ptr, schema.Error,
			"a wait queue needs queue_timeout above 0s (set max_queue: 0 to refuse at once instead)").R(schema.RuleAdmission))
	}
	return ds
}

func isZero(x any) bool {
	switch v := x.(type) {
	case string:
		return v == ""
	case interface{ String() string }: // json.Number
		return v.String() == "0"
	}
	return x == nil
}

// decodeAdmission reads the admission section over its defaults
// (Defaults); checkAdmission reads it before the rest is decoded.
func decodeAdmission(v values) Admission {
	a := Defaults().Admission
	a.Routes = map[string]int{}
	v.int("/admission/max_in_flight", &a.MaxInFlight)
	for _, r := range admissionRoutes {
		n := 0
		v.int("/admission/routes/"+r, &n)
		a.Routes[r] = n
	}
	v.int("/admission/max_queue", &a.MaxQueue)
	v.dur("/admission/queue_timeout", &a.QueueTimeout)
	v.dur("/admission/retry_after", &a.RetryAfter)
	return a
}
