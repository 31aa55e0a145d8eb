package config

import (
	"time"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// Admission is the `admission:` section (cmd/internal/server/admission, docs/operations.md).
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

// checkAdmission compiles admission.priority (its errors point into the
// expression) and refuses settings that would do nothing: a queue or a
// priority without a bound, a queue that cannot wait.
func (c *Config) checkAdmission(f *fileDoc) schema.Diagnostics {
	var ds schema.Diagnostics
	d, ad := c.doc, &f.Admission
	prio := ad.Priority.Set && ad.Priority.V != ""
	if prio {
		p, iss := celenv.CompilePriority(ad.Priority.V)
		for _, is := range iss {
			line, col := d.ScalarPos(ad.Priority.Ptr, is.Line, is.Col)
			ds = append(ds, schema.Diagnostic{File: d.File, Line: line, Col: col,
				Path: d.Path(ad.Priority.Ptr), Msg: is.Msg, Severity: schema.Error, Rule: schema.RuleAdmission})
		}
		c.prio = p
		if p != nil {
			// The load-time search (engine/celenv/priosearch.go): a priority
			// that fails for some request admits it at priority 0, counted
			// and logged; say which request at load.
			if f := p.Counterexample(); f != nil {
				line, col := d.ScalarPos(ad.Priority.Ptr, f.Line, f.Col)
				ds = append(ds, schema.Diagnostic{File: d.File, Line: line, Col: col, Path: d.Path(ad.Priority.Ptr),
					Severity: schema.Warning, Rule: celenv.RuleMayFail, Hint: f.Hint,
					Msg: "this priority fails at run time (" + f.Err + ") for some requests, e.g. " + f.Request +
						"; such a request waits with priority 0 (celflow_cel_errors_total{expr=\"priority\"})"})
			}
		}
	}
	a := c.Admission // decoded
	if !a.Enabled() {
		const msg = "has no effect without a bound: set admission.max_in_flight or admission.routes.<route> above 0"
		if ad.MaxQueue.Set && ad.MaxQueue.V != 0 {
			ds = append(ds, d.Diag(ad.MaxQueue.Ptr, schema.Error, msg).R(schema.RuleAdmission))
		}
		if prio {
			ds = append(ds, d.Diag(ad.Priority.Ptr, schema.Error, msg).R(schema.RuleAdmission))
		}
	}
	if a.MaxQueue > 0 && a.QueueTimeout <= 0 {
		at := ad.QueueTimeout.Pos
		if !d.Has(at.Ptr) {
			at = ad.MaxQueue.Pos
		}
		ds = append(ds, d.Diag(at.Ptr, schema.Error,
			"a wait queue needs queue_timeout above 0s (set max_queue: 0 to refuse at once instead)").R(schema.RuleAdmission))
	}
	return ds
}

// decodeAdmission reads the admission section over its defaults
// (Defaults); checkAdmission reads it before the rest is decoded.
func decodeAdmission(d *admissionDoc) Admission {
	a := Defaults().Admission
	keep(&a.MaxInFlight, d.MaxInFlight)
	a.Routes = map[string]int{"chat": d.Routes.Chat.V, "completions": d.Routes.Completions.V, "generate": d.Routes.Generate.V}
	keep(&a.MaxQueue, d.MaxQueue)
	keep(&a.QueueTimeout, d.QueueTimeout)
	keep(&a.RetryAfter, d.RetryAfter)
	return a
}
