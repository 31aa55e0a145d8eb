package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/celflow/celflow/internal/jsonb"
)

// Kind is the small closed set of error kinds celflow returns (docs/errors.md).
// Every failure is classified once, here; HTTPStatus and Code are the only
// mapping from errors to replies.
type Kind uint8

const (
	KindInternal            Kind = iota // 500 server_error internal_error
	KindInvalidJSON                     // 400 invalid_json
	KindInvalidRequest                  // 400 invalid_request
	KindInvalidMedia                    // 400 invalid_media
	KindMediaFetchFailed                // 400 media_fetch_failed
	KindTooLarge                        // 413 request_too_large
	KindNotFound                        // 404 not_found
	KindMethodNotAllowed                // 405 method_not_allowed
	KindUpstreamRejected                // upstream 4xx: same status, upstream_rejected
	KindBadGateway                      // 502 upstream_error bad_gateway
	KindUpstreamProtocol                // 502 upstream_error upstream_protocol_error
	KindUpstreamTimeout                 // 504 timeout_error upstream_timeout
	KindDeadline                        // 504 timeout_error deadline_exceeded
	KindShuttingDown                    // 503 server_error shutting_down
	KindCancelled                       // client went away: 499 in logs and metrics, nothing is written
	KindDuplicateKey                    // 400 invalid_request_error duplicate_key, Param = the JSON path
	KindReservedField                   // 400 invalid_request_error reserved_field, Param = the JSON path
	KindHeadersTooLarge                 // 431 invalid_request_error request_header_fields_too_large
	KindBadFraming                      // 400 invalid_request_error invalid_framing (the connection is closed)
	KindUpstreamUnavailable             // upstream 503: 503 server_error upstream_unavailable, with Retry-After
)

// Kinds added by issue 12, in their own block so that the iota list above
// keeps its alignment (merges); values are explicit and never reused.
const (
	KindModelsUnavailable Kind = 32 // 503 upstream_error models_unavailable: GET /v1/models, no upstream answered
	KindOverloaded        Kind = 33 // 429 rate_limit_error overloaded: admission bound reached, no room to wait
	KindQueueTimeout      Kind = 34 // 429 rate_limit_error queue_timeout: waited admission.queue_timeout
)

// Kinds added by issue 17.
const (
	KindShutdownCut Kind = 35 // 503 server_error shutdown_cut: in flight when the shutdown budget ran out
)

// Error is celflow's typed error. Message must never contain an upstream
// body, except the relayed message of an upstream 4xx OpenAI error, already
// cut to 512 bytes (UpstreamMsg).
type Error struct {
	Kind Kind
	// Node is the node id, Item the fan-out index (-1 for none). The engine
	// fills both when a node returns an error without them.
	Node string
	Item int
	// Status is the upstream HTTP status for KindUpstreamRejected (the reply
	// status) and informational otherwise.
	Status int
	// Msg is the human message without node prefix or request id.
	Msg string
	// UpstreamMsg is the relayed message of an upstream 4xx (already cut).
	UpstreamMsg string
	// Cause is for logs only; it is never shown to clients.
	Cause error
	// Param is the error body's "param": the JSON path of the offending
	// field (for example sampling_params.extra_args.kv_transfer_params), or
	// the string param of an upstream 4xx OpenAI or vLLM error (already cut);
	// "" for null (docs/errors.md, Upstream 503, 429 and `param`).
	Param string
	// RetryAfter is the reply's Retry-After in whole seconds, 0 for none:
	// an upstream 503 (default DefaultRetryAfter) or 429 (only when the
	// upstream sent a valid one).
	RetryAfter int
}

// DefaultRetryAfter is the Retry-After, in seconds, of an upstream 503 that
// sent none (or one out of bounds) (docs/errors.md, Upstream 503, 429 and `param`).
const DefaultRetryAfter = 1

// UpstreamStatus is THE mapping of an upstream's non-2xx answer to an
// error (docs/errors.md): a 503 is KindUpstreamUnavailable with retryAfter or
// the default; a 4xx is KindUpstreamRejected with the same status, the
// relayed message and param (and, for a 429, its Retry-After); anything
// else is KindBadGateway. retryAfter is the upstream's valid Retry-After in
// seconds, 0 when absent or untrusted. msg and param must already be cut.
func UpstreamStatus(code int, msg, param string, retryAfter int) *Error {
	switch {
	case code == http.StatusServiceUnavailable:
		if retryAfter <= 0 {
			retryAfter = DefaultRetryAfter
		}
		return &Error{Kind: KindUpstreamUnavailable, Item: -1, Status: code,
			Msg: "upstream unavailable: HTTP 503", RetryAfter: retryAfter}
	case code >= 400 && code < 500:
		e := &Error{Kind: KindUpstreamRejected, Item: -1, Status: code,
			Msg: "rejected the request: HTTP " + strconv.Itoa(code), UpstreamMsg: msg, Param: param}
		if code == http.StatusTooManyRequests {
			e.RetryAfter = retryAfter
		}
		return e
	}
	return &Error{Kind: KindBadGateway, Item: -1, Status: code, Msg: "upstream answered HTTP " + strconv.Itoa(code)}
}

// Errorf builds an *Error of a kind.
func Errorf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Item: -1, Msg: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	s := e.Where()
	if s != "" {
		s += ": "
	}
	s += e.Msg
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Cause }

// Where is "node" or "node[i]".
func (e *Error) Where() string {
	if e.Node == "" {
		return ""
	}
	if e.Item >= 0 {
		return e.Node + "[" + strconv.Itoa(e.Item) + "]"
	}
	return e.Node
}

// ClientMessage is the message shown to the client, ending with the request id.
// For an upstream 4xx: "<node> rejected the request: HTTP <code>[: <msg>]".
func (e *Error) ClientMessage(requestID string) string {
	var s string
	if e.Kind == KindUpstreamRejected {
		s = e.Where() + " rejected the request: HTTP " + strconv.Itoa(e.Status)
		if e.UpstreamMsg != "" {
			s += ": " + e.UpstreamMsg
		}
	} else {
		s = e.Msg
		if w := e.Where(); w != "" {
			s = w + ": " + s
		}
	}
	return s + " (request_id: " + requestID + ")"
}

// AsError classifies any error into an *Error: context errors become
// cancellation or deadline, anything unknown is internal.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if e := fromDomain(err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: KindDeadline, Item: -1, Msg: "request deadline exceeded", Cause: err}
	case errors.Is(err, context.Canceled):
		return &Error{Kind: KindCancelled, Item: -1, Msg: "client disconnected", Cause: err}
	}
	return &Error{Kind: KindInternal, Item: -1, Msg: "internal error", Cause: err}
}

// HTTPStatus is THE mapping from error kinds to reply statuses.
func (e *Error) HTTPStatus() int {
	switch e.Kind {
	case KindInvalidJSON, KindInvalidRequest, KindInvalidMedia, KindMediaFetchFailed, KindDuplicateKey, KindReservedField, KindBadFraming:
		return http.StatusBadRequest
	case KindHeadersTooLarge:
		return http.StatusRequestHeaderFieldsTooLarge
	case KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case KindNotFound:
		return http.StatusNotFound
	case KindMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case KindUpstreamRejected:
		if e.Status >= 400 && e.Status < 500 {
			return e.Status
		}
		return http.StatusBadGateway
	case KindBadGateway, KindUpstreamProtocol:
		return http.StatusBadGateway
	case KindUpstreamTimeout, KindDeadline:
		return http.StatusGatewayTimeout
	case KindShuttingDown, KindUpstreamUnavailable:
		return http.StatusServiceUnavailable
	case KindCancelled:
		return 499 // never written: the client is gone; logs and metrics only
	case KindModelsUnavailable, KindShutdownCut:
		return http.StatusServiceUnavailable
	case KindOverloaded, KindQueueTimeout:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// Type and Code are the OpenAI error body's "type" and "code".
func (e *Error) Type() string {
	switch e.Kind {
	case KindBadGateway, KindUpstreamProtocol:
		return "upstream_error"
	case KindUpstreamTimeout, KindDeadline:
		return "timeout_error"
	case KindShuttingDown, KindInternal, KindUpstreamUnavailable, KindShutdownCut:
		return "server_error"
	case KindUpstreamRejected:
		if e.HTTPStatus() >= 500 {
			return "upstream_error"
		}
	}
	if e.Kind == KindCancelled {
		return "server_error"
	}
	if e.Kind == KindModelsUnavailable {
		return "upstream_error"
	}
	if e.Kind == KindOverloaded || e.Kind == KindQueueTimeout {
		return "rate_limit_error"
	}
	return "invalid_request_error"
}

func (e *Error) Code() string {
	switch e.Kind {
	case KindInvalidJSON:
		return "invalid_json"
	case KindInvalidRequest:
		return "invalid_request"
	case KindInvalidMedia:
		return "invalid_media"
	case KindMediaFetchFailed:
		return "media_fetch_failed"
	case KindTooLarge:
		return "request_too_large"
	case KindNotFound:
		return "not_found"
	case KindMethodNotAllowed:
		return "method_not_allowed"
	case KindUpstreamRejected:
		if e.HTTPStatus() >= 500 {
			return "bad_gateway"
		}
		return "upstream_rejected"
	case KindBadGateway:
		return "bad_gateway"
	case KindUpstreamProtocol:
		return "upstream_protocol_error"
	case KindUpstreamTimeout:
		return "upstream_timeout"
	case KindDeadline:
		return "deadline_exceeded"
	case KindShuttingDown:
		return "shutting_down"
	case KindCancelled:
		return "client_closed_request"
	case KindUpstreamUnavailable:
		return "upstream_unavailable"
	case KindDuplicateKey:
		return "duplicate_key"
	case KindReservedField:
		return "reserved_field"
	case KindHeadersTooLarge:
		return "request_header_fields_too_large"
	case KindBadFraming:
		return "invalid_framing"
	case KindModelsUnavailable:
		return "models_unavailable"
	case KindOverloaded:
		return "overloaded"
	case KindQueueTimeout:
		return "queue_timeout"
	case KindShutdownCut:
		return "shutdown_cut"
	}
	return "internal_error"
}

// DuplicateKey is the 400 for a body with a repeated member name (RFC 8259
// leaves its meaning undefined; I-JSON forbids it): path is the second
// occurrence's JSON path (jsonb.DuplicateKeyError.Path), shown as "param".
func DuplicateKey(path string, cause error) *Error {
	return &Error{Kind: KindDuplicateKey, Item: -1, Param: path, Cause: cause,
		Msg: "request body has a duplicate member name: " + path + " appears twice in one object; send each member once"}
}

// Classified is implemented by a domain error that knows what it means to
// the client (connectors/mm's rejections, a connector's protocol errors): the
// core classifies through it instead of knowing the packages above it.
// AsError takes the outermost one in the chain (errors.As), so a package may
// wrap another's classified error in its own.
type Classified interface {
	error
	// EngineError is the error as the engine reports it; a new *Error each
	// call (the engine fills Node and Item).
	EngineError() *Error
}

// fromDomain classifies errors the core does not define: a Classified
// error, or jsonb's duplicate member name. jsonb lies below the core (it
// cannot name *Error), and is the core's own body format, so the core knows
// its one error type.
func fromDomain(err error) *Error {
	var c Classified
	if errors.As(err, &c) {
		if e := c.EngineError(); e != nil {
			return e
		}
	}
	var dup *jsonb.DuplicateKeyError
	if errors.As(err, &dup) {
		return DuplicateKey(dup.Path, err)
	}
	return nil
}
