package asyncbroker

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/celflow/celflow/connectors/async"
	"github.com/celflow/celflow/engine"
)

// Error codes of the async front (docs/async.md: llm-d's spellings, upper
// case).
const (
	CodeEnqueueFailed       = "ENQUEUE_FAILED"       // 503: Redis unavailable at submit
	CodeFetchFailed         = "FETCH_FAILED"         // 503: Redis unavailable at GET /v1/requests/{id}
	CodeCancelFailed        = "CANCEL_FAILED"        // 503: Redis unavailable at DELETE /v1/requests/{id}
	CodeQueueFull           = "QUEUE_FULL"           // 429: a backlog bound
	CodeIdempotencyConflict = "IDEMPOTENCY_CONFLICT" // 409: same id, another body
	CodeUnknownRequest      = "UNKNOWN_REQUEST"      // 410: unknown, expired, deleted, another tenant's
)

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// writeError writes an OpenAI-shaped error whose message ends with the
// request id, and the id header.
func writeError(w http.ResponseWriter, status int, code, msg, id string) {
	var b errorBody
	b.Error.Message = msg + " (request_id: " + id + ")"
	b.Error.Type = "invalid_request_error"
	if status >= 500 {
		b.Error.Type = "server_error"
	}
	b.Error.Code = code
	out, _ := json.Marshal(&b)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", id)
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

// HeaderWait answers a GET with ?wait=N: the seconds the long-poll was
// granted, after the wait_cap clamp; 0 when max_waiters long-polls were
// held and the current state was answered at once.
const HeaderWait = "X-Celflow-Wait"

// storeRetryAfter is the Retry-After of a 503 for an unavailable request
// store: Redis restarts, fails over or frees memory in seconds.
const storeRetryAfter = 2 * time.Second

// writeStoreError is the 503 of a request store (Redis) that failed: the
// operation's code and a Retry-After; the Redis error goes to the log only.
func writeStoreError(w http.ResponseWriter, code, id string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(storeRetryAfter/time.Second)))
	msg := "the request store is unavailable; retry later"
	if code == CodeEnqueueFailed {
		msg = "the request could not be queued: the request store is unavailable; retry later"
	}
	writeError(w, http.StatusServiceUnavailable, code, msg, id)
}

// writePending is the 202 of a queued or running request.
func writePending(w http.ResponseWriter, id string, st async.State, retry time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", id)
	h.Set("Location", "/v1/requests/"+id)
	h.Set("Retry-After", strconv.Itoa(max(1, int(retry/time.Second))))
	if st == "" {
		st = async.StateQueued
	}
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"id":"` + id + `","status":"pending","state":"` + string(st) + `"}`))
}

// codeStatus maps a stored terminal error to the GET status (docs/async.md, Client API).
func codeStatus(code string) int {
	switch code {
	case async.CodeGateDropped:
		return http.StatusTooManyRequests
	case async.CodeDeadline:
		return http.StatusGatewayTimeout
	case async.CodeInvalid:
		return http.StatusBadRequest
	case async.CodeCancelled:
		return 499
	}
	return http.StatusBadGateway
}

// writeRecord answers with a stored record's state: the result verbatim,
// a terminal error, pending, or 410.
func writeRecord(w http.ResponseWriter, id string, r async.Record, retry time.Duration) int {
	switch r.State {
	case async.StateDone:
		if r.Result.Status > 0 {
			h := w.Header()
			h.Set("Content-Type", "application/json")
			h.Set("X-Request-Id", id)
			w.WriteHeader(r.Result.Status)
			_, _ = w.Write(r.Result.Body)
			return r.Result.Status
		}
		st := codeStatus(r.Result.Code)
		msg := r.Result.Message
		if msg == "" {
			msg = "the request ended with " + r.Result.Code
		}
		writeError(w, st, r.Result.Code, engine.CutUTF8(msg, 512), id)
		return st
	case async.StateQueued, async.StateInProgress:
		writePending(w, id, r.State, retry)
		return http.StatusAccepted
	}
	writeError(w, http.StatusGone, CodeUnknownRequest, "unknown request: never queued, expired, deleted, or another tenant's", id)
	return http.StatusGone
}
