package engine

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/google/uuid"

	"github.com/celflow/celflow/internal/jsonb"
)

// Entry is what the front does with a request before the workflow runs: it
// draws the canonical request id from the client's headers, keeps the
// header map a net/http handler sees (canonical names, no Host: net/http
// moves it to the request's Host field), parses the body and checks it per
// route, and returns what is known at entry (a generate body's token ids
// and media). serve, explain and the tests: block run the same function:
// the front's (front.Entry), which the composition root hands the loader in
// LoadOptions.Entry.
//
// A refusal is the *Error the front answers with (400 invalid_json, ...):
// no node runs.
type Entry func(route Route, h http.Header, body []byte) (Entered, *Error)

// Entered is a request as the front hands it to the workflow.
type Entered struct {
	Req    *Request
	Obj    *jsonb.Object // the body's top-level index
	Tokens Tokens        // generate: the body's token_ids
	Media  []MediaItem   // generate: the body's features
}

// NewRequest is the core's part of the front's entry: the body indexed once
// (it must be a JSON object without repeated member names) and model and
// stream read without validating them. The front adds its route checks
// (media shapes, generate bodies) on top.
func NewRequest(id string, route Route, h http.Header, body []byte) (*Request, *jsonb.Object, *Error) {
	obj, err := jsonb.Parse(body)
	if err != nil {
		if dup, ok := errors.AsType[*jsonb.DuplicateKeyError](err); ok { // the same scan finds repeated names, on every route
			return nil, nil, DuplicateKey(dup.Path, err)
		}
		return nil, nil, Errorf(KindInvalidJSON, "request body must be a JSON object: %v", err)
	}
	req := &Request{ID: id, Route: route, Header: h, Body: body}
	if raw, ok := obj.Get("model"); ok {
		req.Model = jsonString(raw)
	}
	if raw, ok := obj.Get("stream"); ok {
		req.Stream = string(raw) == "true" // the literal only: "true" (a string) is not streaming
	}
	return req, obj, nil
}

// jsonString returns a raw JSON string's value, or "" for any other value.
func jsonString(raw []byte) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return ""
			}
			return s
		}
	}
	return string(inner)
}

// coreEntry is the entry of a workflow loaded without the front's (the
// core's own tests): NewRequest under a fresh id, no Host, and a generate
// body's token_ids. The binary always passes the front's.
func coreEntry(route Route, h http.Header, body []byte) (Entered, *Error) {
	h = h.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Del("Host")
	req, obj, e := NewRequest(uuid.NewString(), route, h, body)
	if e != nil {
		return Entered{}, e
	}
	in := Entered{Req: req, Obj: obj}
	if route == RouteGenerate {
		toks, err := generateTokens(body)
		if err != nil {
			return Entered{}, Errorf(KindInvalidRequest, "%v", err)
		}
		in.Tokens, in.Media = toks, scanMedia(route, body)
	}
	return in, nil
}
