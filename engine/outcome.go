package engine

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
)

// Status is a node's outcome status.
type Status uint8

const (
	StatusPending Status = iota
	StatusSucceeded
	StatusFailed
	StatusSkipped   // its when: guard was false, or the run ended before it ran (reason "ended")
	StatusOmitted   // none of its incoming edges fired
	StatusTimedOut  // its own timeout (or the clipped request deadline) fired
	StatusCancelled // the client went away, or a sibling failure cancelled it
)

var statusNames = [...]string{"pending", "succeeded", "failed", "skipped", "omitted", "timed_out", "cancelled"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// Outcome is the recorded result of one node in one run.
type Outcome struct {
	Node       string
	Type       string
	Status     Status
	Reason     string // why skipped/omitted/failed ("guard false", "ended", "no incoming edge fired", ...)
	HTTPStatus int
	Header     http.Header
	Err        *Error
	Start      time.Time
	Duration   time.Duration
	Attempt    int
	Edge       string     // the incoming edge that fired ("render", "try_decode[response.status == 412]")
	Target     *LegTarget // the target rule that chose the node's legs, nil for none (shared, read-only)
	Handled    bool       // failed or timed out, and an outgoing edge routed the failure
	Items      []Outcome
	Outputs    map[string]any
	Responded  bool
	Retries    []AttemptFailure // attempts that failed and were retried, in order (retrylog.go)
	CELErrors  []CELError       // its expressions that failed at run time, in order (celerror.go)
	Note       string           // explain only: what the node type says of itself (Noter)
	Failovers  []Failover       // replays after its leg broke mid-reply, in order (replay.go)
}

// Report is what a run leaves behind, for logs, metrics and `celflow demo`.
type Report struct {
	Workflow string
	Outcomes []Outcome // in the workflow's node order
	Err      *Error    // the run's error, nil on success
	Answered bool      // a node wrote the reply
	Duration time.Duration
}

// Runner serves one request through a compiled workflow. It writes the reply
// to w when a node answers; when it returns with Report.Answered false, the
// caller writes Report.Err with WriteError.
type Runner interface {
	Serve(r *Run) *Report
}

// errorBody is OpenAI's error shape: exactly message, type, param, code.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// WriteError writes celflow's JSON error reply (docs/errors.md). It is the only
// place that writes error replies.
func WriteError(w http.ResponseWriter, e *Error, requestID string) {
	var b errorBody
	b.Error.Message = e.ClientMessage(requestID)
	b.Error.Type = e.Type()
	b.Error.Code = e.Code()
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	out, _ := json.Marshal(&b)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", requestID)
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Kind == KindShuttingDown || e.Kind == KindHeadersTooLarge || e.Kind == KindBadFraming {
		h.Set("Connection", "close")
	}
	w.WriteHeader(e.HTTPStatus())
	_, _ = w.Write(out)
}

// CutUTF8 cuts s to at most n bytes on a UTF-8 boundary.
func CutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
