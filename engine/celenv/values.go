package celenv

import (
	"net/http"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"strings"
	"time"
)

// The Go values behind CEL's object types. The engine embeds them in its
// per-run state and updates them in place, so evaluating a guard reads the
// run directly: nothing is copied into a map per request.

// Request is `request`. Header is read lazily into `headers`.
type Request struct {
	ID, Format, Path, Model string
	Stream                  bool
	Header                  http.Header
	hdr                     map[string]string
	sv                      [4]ref.Val
}

// str returns field i as a CEL string, boxed once per request.
func (r *Request) str(i int, s string) ref.Val {
	if r.sv[i] == nil {
		r.sv[i] = strVal(s)
	}
	return r.sv[i]
}

// Headers is `request.headers`: lowercased names, first value; built on first use.
func (r *Request) Headers() map[string]string {
	if r.hdr == nil {
		r.hdr = lowerFirst(r.Header)
	}
	return r.hdr
}

// Media is one element of `media`.
type Media struct {
	Index    int64
	Modality string
	Type     string
	Size     int64
	Remote   bool
	Hash     string
}

// Tokens is `tokens`.
type Tokens struct {
	Known bool
	Count int64
}

// Response is NodeState.response: the upstream answer of the node's last attempt.
type Response struct {
	Status int64
	Header http.Header
	hdr    map[string]string
}

// Headers is `response.headers`: lowercased names, first value; built on first use.
func (r *Response) Headers() map[string]string {
	if r.hdr == nil {
		r.hdr = lowerFirst(r.Header)
	}
	return r.hdr
}

// Set replaces the response, dropping the cached header map.
func (r *Response) Set(status int, h http.Header) {
	r.Status, r.Header, r.hdr = int64(status), h, nil
}

// NodeState is `nodes.<id>` and, in edge conditions and retry predicates, `outcome`.
type NodeState struct {
	Status   string
	Reason   string
	Response Response
	Duration time.Duration
	Attempt  int64
	Outputs  map[string]any
}

// Nodes is `nodes`: one NodeState per node, in workflow order.
type Nodes struct {
	States []NodeState
}

// Config is `config`: the workflow's vars, in the order of the Config type's fields.
type Config struct {
	Values []any
}

var emptyHeaders = map[string]string{}

// Preboxed values: reading a status or a small count allocates nothing.
var (
	smallInts [1024]ref.Val
	knownStrs = map[string]ref.Val{}
)

func init() {
	for i := range smallInts {
		smallInts[i] = types.Int(i)
	}
	for _, s := range []string{"", "pending", "succeeded", "failed", "skipped", "omitted", "timed_out", "cancelled",
		"chat", "completions", "generate", "/v1/chat/completions", "/v1/completions", "/inference/v1/generate"} {
		knownStrs[s] = types.String(s)
	}
}

func intVal(i int64) ref.Val {
	if i >= 0 && i < int64(len(smallInts)) {
		return smallInts[i]
	}
	return types.Int(i)
}

func strVal(s string) ref.Val {
	if v, ok := knownStrs[s]; ok {
		return v
	}
	return types.String(s)
}

func lowerFirst(h http.Header) map[string]string {
	if len(h) == 0 {
		return emptyHeaders
	}
	m := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			m[strings.ToLower(k)] = v[0]
		}
	}
	return m
}
