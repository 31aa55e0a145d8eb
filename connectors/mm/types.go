package mm

import (
	"errors"
	"fmt"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// mm parses the workflow language's media and tokens (engine.MediaItem,
// engine.Tokens: the CEL variables media and tokens, defined by the core)
// from bodies and replies. It sits above the engine core: it imports
// engine, and the engine imports nothing of mm's. Its *Error classifies
// itself (engine.Classified).

// MediaItem and Tokens are the core's types, under the names mm's callers
// have always used.
type (
	MediaItem = engine.MediaItem
	Tokens    = engine.Tokens
)

// ErrKind says whose input an *Error rejects; EngineError maps it to the
// engine's error kind (and so to the reply's status and code).
type ErrKind uint8

const (
	BadRequest ErrKind = iota + 1 // a client field: 400 invalid_request
	NotJSON                       // the client body is not a JSON object: 400 invalid_json
	BadReply                      // a render reply broke the protocol: 502 upstream_protocol_error
)

// Error is a rejected body or reply. Msg names the field's path and is
// safe to show a client; Cause is for logs only.
type Error struct {
	Kind  ErrKind
	Msg   string
	Cause error
	// Param is the reply's "param" (the offending field's path), "" for none.
	Param string
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Msg + ": " + e.Cause.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Cause }

// EngineError classifies the rejection for engine.AsError: a client field
// is 400 invalid_request, a body that is not a JSON object 400
// invalid_json, a broken render reply 502 upstream_protocol_error.
func (e *Error) EngineError() *engine.Error {
	k := engine.KindInvalidRequest
	switch e.Kind {
	case NotJSON:
		k = engine.KindInvalidJSON
	case BadReply:
		k = engine.KindUpstreamProtocol
	}
	return &engine.Error{Kind: k, Item: -1, Msg: e.Msg, Cause: e.Cause, Param: e.Param}
}

var _ engine.Classified = (*Error)(nil)

// ScanError is a part scan's failure as the engine reports it: a refused
// media shape is the client's 400 with the part's path as param (an
// *Error); anything else means the bytes are not JSON.
func ScanError(err error) *engine.Error {
	if _, ok := errors.AsType[*Error](err); ok {
		return engine.AsError(err)
	}
	e := engine.Errorf(engine.KindInvalidJSON, "request body is not valid JSON")
	e.Cause = err
	return e
}

func errorf(k ErrKind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Unquote is jsonb.Unquote, and TopLevel jsonb.TopLevel: kept here for the
// nodes that read the body through mm.
func Unquote(raw []byte) ([]byte, bool) { return jsonb.Unquote(raw) }

func TopLevel(body []byte, key string) ([]byte, bool) { return jsonb.TopLevel(body, key) }
