// Package async is the Redis wire code of celflow's async requests
// (docs/async.md): how a queued request, its claim by a dispatcher, its result
// and its cancellation are laid out in Redis, behind one Backend interface
// with two implementations:
//
//   - Builtin (the default): Redis Streams consumer groups. XADD per
//     queue/lane, XREADGROUP to claim, XAUTOCLAIM to redeliver what a dead
//     replica held, the pending list's delivery counter for max_deliveries
//     and a dead-letter stream; every transition that must be exclusive
//     (claim, finish, renew) is one Lua script that first checks the claim's
//     owner in the pending list (XACK alone does not), so a stale finisher
//     is fenced and exactly one result is visible per (tenant, id).
//   - LLMD: the envelope, keys, cancel and quota scheme of docs/async.md
//     (The llm-d-async back end), so an unmodified llm-d-async processor
//     drains what celflow queues.
//
// Like every connector it imports nothing of celflow's: only go-redis. The
// HTTP contract, the workflow and the dispatcher live in nodes/asyncbroker.
package async

import (
	"context"
	"errors"
	"time"
)

// State is where a request stands.
type State string

const (
	StateUnknown    State = ""            // never queued, expired, deleted, or another tenant's
	StateQueued     State = "queued"      // waiting for a dispatcher
	StateInProgress State = "in_progress" // claimed, running
	StateDone       State = "done"        // a result (or terminal error record) is stored
)

// Terminal error codes of a result with Status 0 (docs/async.md, The
// llm-d-async back end, plus DEAD_LETTERED for a request redelivered more
// than max_deliveries times).
const (
	CodeDeadline     = "DEADLINE_EXCEEDED"
	CodeCancelled    = "CANCELLED"
	CodeGateDropped  = "GATE_DROPPED"
	CodeInvalid      = "INVALID_REQUEST"
	CodeInference    = "INFERENCE_ERROR"
	CodeDeadLettered = "DEAD_LETTERED"
)

// Job is one request to queue.
type Job struct {
	Tenant, ID string
	Queue      string // the queue (builtin: one stream per queue and lane)
	Lane       string // the tier/lane within the queue (builtin); "" = the first lane
	Path       string // client path, e.g. /v1/chat/completions
	Body       []byte // the client body, verbatim
	// BodyHash identifies the body for idempotency (hex SHA-256); Submit
	// computes it when empty.
	BodyHash string
	Created  time.Time
	Deadline time.Time
	// Headers are copied onto the request when it is dispatched
	// (forward_headers, traceparent).
	Headers map[string]string
}

// Result is a stored outcome. Status > 0: an HTTP answer came back (any
// status, Body verbatim). Status 0: none, and Code says why.
type Result struct {
	Status  int
	Body    []byte
	Code    string
	Message string
}

// Record is what Fetch sees.
type Record struct {
	State    State
	Result   Result    // when State is StateDone
	Deadline time.Time // when known and not done
}

// Outcome of a Submit.
type Outcome int

const (
	Created    Outcome = iota + 1 // queued now
	Reattached                    // the same id and body is live or has a result
	Conflict                      // the same id with another body (409)
	FullTenant                    // the tenant's backlog bound (429)
	FullQueue                     // the queue's backlog bound (429)
)

// Submitted is what Submit did.
type Submitted struct {
	Outcome Outcome
	State   State // the current state (Reattached)
}

// Backend is what the HTTP side of the async front needs, whichever back
// end holds the requests. Every method is safe for concurrent use.
type Backend interface {
	// Submit queues j, or reattaches to the live or finished request with
	// the same (tenant, id) and body.
	Submit(ctx context.Context, j *Job) (Submitted, error)
	// Fetch reads a request's state without consuming its result. The
	// first read of a result shortens its remaining life to the grace.
	Fetch(ctx context.Context, tenant, id string) (Record, error)
	// Cancel cancels a queued or running request (best effort). With
	// keep, a CANCELLED record is stored (a wait-mode client left);
	// without, the request and its result are deleted (DELETE).
	Cancel(ctx context.Context, tenant, id string, keep bool) error
	// Watch returns a channel that is closed when the request's result may
	// have landed (a hint: callers re-Fetch, and poll as a fallback), and
	// a function releasing the watch.
	Watch(tenant, id string) (<-chan struct{}, func())
	Close() error
}

// ErrBadName: a tenant, id or queue name that must not become part of a
// Redis key.
var ErrBadName = errors.New("async: invalid name")

// validName reports a name safe inside keys (no ':' and no spaces).
func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// QuotaCounter admits a tenant's requests against a per-window limit in
// the quota key shared with llm-d-async's quota gate (<prefix><attribute>:
// <tenant>), with that gate's sliding-window semantics (quota.go): true
// (reserved, and counted) while fewer than limit were admitted in the last
// window; false (overflow, not counted).
type QuotaCounter interface {
	TakeQuota(ctx context.Context, key string, limit int64, window time.Duration) (bool, error)
}
