package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/celflow/celflow/internal/jsonb"
)

// Need is one requirement of a node. Routes limits it to some client routes
// (empty means every route): a tokens-in prefill needs tokens on chat only.
type Need struct {
	Key    AnyKey
	Routes []Route
}

// Contract is what a built node declares to the compiler.
type Contract struct {
	// Needs and Provides name per-request data by key: the core's own
	// (KeyMedia, KeyTokens, KeyFeatures, in State) or a Key[T] declared by
	// the package that owns the data. The dataflow check compares keys by
	// name.
	Needs    []Need
	Provides []AnyKey
	// Responds: the node may answer the client; once it has, the run ends.
	Responds bool
	// Terminal: the node answers the client whenever it succeeds (decode), so
	// no node may follow it; a responder that answers only sometimes
	// (conditional-decode) is not terminal and its successors need an edge
	// condition. Only meaningful with Responds.
	Terminal bool
	// Role is the upstream role the node calls ("encode", "prefill", "decode",
	// "render", or "" for none); used for spans, metrics and pool checks.
	Role string
	// SurvivesEnd: the node keeps running when another node ends the run
	// (the concurrent SGLang prefill, docs/protocol.md, kv-sglang). Client disconnect and the
	// request deadline still cancel it.
	SurvivesEnd bool
	// Gate: the node decides, before any other work, whether the request
	// runs now or is queued (the async broker). A request it lets through
	// succeeds without an answer (its successors' edges read success); a
	// queued one is run again later from the workflow's start, so every node
	// must come after it, or the queued request would run those nodes
	// twice (graph/gate-not-first). Only meaningful with Responds.
	Gate bool
	// SharedEndpoint: the node's endpoint is drawn for the whole request,
	// outside its own legs (the concurrent SGLang session, shared with
	// decode), so a target rule may not choose its pool.
	SharedEndpoint bool
	// Wants is data the node runs without but whose absence on a route
	// defeats it (direct-mode conditional decode predicts hits from the
	// prompt's tokens). The compiler warns, naming Why, when no node that
	// provides it can precede the node on a route the need lists.
	Wants []Need
	Why   string
	// Statuses are the upstream HTTP statuses with a meaning of their own
	// that the node's failures carry (conditional-decode: 412, the miss).
	// The ending proof tries them; an edge comparing a predecessor's
	// response.status with a status some type declares and the
	// predecessor's type does not is flagged (cel/status-never-produced).
	Statuses []int
	// Outputs are what the node puts in Result.Outputs, readable as
	// nodes.<id>.outputs.<name> and type-checked like a field: reading an
	// output the type does not declare is a load error. An output the node
	// did not produce on a run reads as its type's zero value.
	Outputs []Output
	// Failover summarises what the node does when its leg breaks after it
	// began answering (decode's failover: block), for explain and graph;
	// "" for nothing. The core only shows it.
	Failover string
}

// Output is one declared output. Type is a CEL type name: bool, int,
// double, string, duration (or dyn, which guards then cannot use without
// converting). The Go value in Result.Outputs must match it: bool, int64,
// float64, string, time.Duration.
type Output struct {
	Name, Type string
}

// Node is one built, immutable node of a compiled workflow. Run is called
// once per attempt (and once per item for a fan-out node) and must be safe
// for concurrent use by many requests.
type Node interface {
	Contract() Contract
	Run(ctx context.Context, x *Exec) Result
}

// Merger is implemented by fan-out node types that combine their items'
// results (encode merges ec_transfer_params in item order). The scheduler
// calls Merge once, after every item succeeded, with results in item order.
type Merger interface {
	Merge(ctx context.Context, x *Exec, items []Result) Result
}

// Result is what one execution of a node returns. Err == nil means success.
// A node that got an HTTP answer it does not accept (a 412 on conditional
// decode, a 5xx on prefill) returns an *Error carrying that status, so edge
// conditions can route on it.
type Result struct {
	HTTPStatus int         // upstream status, 0 when no call was made
	Header     http.Header // upstream response headers (canonical names) when useful to edges
	Err        error
	Responded  bool           // the node answered the client
	Outputs    map[string]any // declared outputs, readable as nodes.<id>.outputs (CEL-native values)
	// Attrs are extra span attributes the node wants recorded (endpoint, bytes, ttfb...).
	Attrs map[string]any
	// Failovers are the replays the node made after its leg broke (replay.go).
	Failovers []Failover
}

// Exec is a node's view of the run for one execution. It is valid until Run
// returns: the engine reuses it for other requests, so a node must not keep
// it (a node whose contract SurvivesEnd may, until it returns).
type Exec struct {
	Run     *Run
	NodeID  string
	Attempt int // 1-based
	Index   int // fan-out item index, -1 when not a fan-out
	// Item is the fan-out element, nil when not a fan-out: for a list of
	// media (`foreach: media` or a filter of it) the run's engine.MediaItem
	// (a copy), else the CEL value as Go (string, int64, map[string]any...).
	Item any
	Span trace.Span
	// Target is what the node's target rules chose for this request (the
	// same for every attempt and item); nil when it has none or none
	// matched. Read-only: it is shared by every request.
	Target *LegTarget

	ctx context.Context // the node's context across attempts (scheduler only)
	rs  *run            // the walk, for Rerun (replay.go); nil outside one
}

// Request is the parsed client request, immutable once the run starts.
type Request struct {
	ID     string      // canonical request id (docs/protocol.md, Request id)
	Route  Route       // which client path
	Header http.Header // client headers as received
	Body   []byte      // the client body, exactly as received
	Model  string
	Stream bool // the JSON literal true only
}

// Route is the client path a request came in on.
type Route uint8

const (
	RouteChat Route = iota + 1
	RouteCompletions
	RouteGenerate
)

// Path returns the route's URL path, which is also its format path.
func (r Route) Path() string {
	switch r {
	case RouteChat:
		return "/v1/chat/completions"
	case RouteCompletions:
		return "/v1/completions"
	case RouteGenerate:
		return "/inference/v1/generate"
	}
	return ""
}

// String is the format name used in CEL (request.format) and config.
func (r Route) String() string {
	switch r {
	case RouteChat:
		return "chat"
	case RouteCompletions:
		return "completions"
	case RouteGenerate:
		return "generate"
	}
	return "unknown"
}

// Routes lists every route, in a stable order.
var Routes = []Route{RouteChat, RouteCompletions, RouteGenerate}

// ParseRoute maps a format name to its route.
func ParseRoute(s string) (Route, bool) {
	for _, r := range Routes {
		if r.String() == s {
			return r, true
		}
	}
	return 0, false
}

// Run is the state of one request's walk. The scheduler owns it; nodes
// write only the State fields and Key values their contract Provides, and
// the DAG orders every writer before its readers (siblings may not provide
// the same key, unless it is a rendezvous: Key.Meet).
type Run struct {
	// Ctx is the request's context: cancelled when the client goes away.
	Ctx      context.Context
	Req      *Request
	State    State
	Deadline time.Time // zero when request_timeout is off
	// Slot is the admission slot the request holds (nil: none). A node that
	// only waits for work done elsewhere — the async broker's wait mode,
	// whose queued run needs capacity of its own — releases it first, so
	// that waiting clients cannot starve the very runs they wait for.
	Slot SlotHolder
	// Stubbed marks a run of explain or a tests: block (no worker is
	// called): the scheduler keeps its records and spans but logs no
	// retries, which would read as real failures in validate's output.
	Stubbed bool
	// Variant is the Variant.Mark a stubbed run explains ("" under serve):
	// a Previewer shows that outcome.
	Variant string
	// Client is where a responding node writes the reply. Use Answer to claim it.
	client   http.ResponseWriter
	answerMu sync.Mutex
	answered bool

	valsMu sync.Mutex
	vals   map[slot]any // the values of Key[T]s, by declaration and scope

	abandoned atomic.Bool
}

// Abandon records that work a worker did for this request was thrown away
// because the client left before it could be used (a prefill whose KV
// decode never read: docs/protocol.md, Cancellation). Metrics count it.
func (r *Run) Abandon() { r.abandoned.Store(true) }

// Abandoned reports whether a node called Abandon.
func (r *Run) Abandoned() bool { return r.abandoned.Load() }

// NewRun prepares a run for req; w receives the responding node's reply.
func NewRun(ctx context.Context, req *Request, w http.ResponseWriter) *Run {
	return &Run{Ctx: ctx, Req: req, client: w, State: State{Body: req.Body}}
}

// Answer claims the client response writer. It returns false when another
// node already answered; only one node ever writes to the client.
func (r *Run) Answer() (http.ResponseWriter, bool) {
	r.answerMu.Lock()
	defer r.answerMu.Unlock()
	if r.answered {
		return nil, false
	}
	r.answered = true
	return r.client, true
}

// Answered reports whether some node has claimed the client writer.
func (r *Run) Answered() bool {
	r.answerMu.Lock()
	defer r.answerMu.Unlock()
	return r.answered
}

// State is the typed blackboard of a run.
type State struct {
	// Body is the current client body: the received bytes, or the version
	// with media URLs rewritten to data URIs by fetch-media. Legs splice
	// their edits into it (internal/jsonb); it is never re-encoded whole.
	Body []byte
	// BodyObj is the index of Body when someone already parsed it (the front
	// does, once); legs reuse it instead of scanning the body again. A node
	// that replaces Body must replace or clear it; readers check that
	// BodyObj.Buf is Body.
	BodyObj *jsonb.Object

	Media  []MediaItem // items in order of appearance (fetch-media, render, generate entry)
	Tokens Tokens      // T
}

// BuildContext is what a node type's Build gets from the compiler. Build is
// the node's provision step: it may open what the node holds (transports,
// caches), which a Closer releases, but it must have no effect outside the
// workflow being built. Anything shared with the process or with other
// workflows (the upstream worker client, the async runtime, metrics hooks)
// comes through Services, never through a process global, so that a
// workflow whose load or reload is refused has changed nothing live.
type BuildContext struct {
	// Services are what the composition root (cmd/celflow) lends the nodes
	// of this build, by name; read them with Service. A missing service
	// means validate-only mode (no upstream section, no async config).
	Services Services
	Defaults Defaults
	Warn     func(path, msg string) // a warning at a params path (JSON pointer below params)
	// WriteTimeout is the server's write_timeout for non-streaming replies
	// (docs/protocol.md, Timeouts): relaying nodes apply it from the moment they start writing.
	WriteTimeout time.Duration
	// RetryAttempts is the node's attempts when the workflow sets them
	// (retry.attempts of its own retry: block, else of defaults.retry), 0
	// when it does not: a node type may then apply a default of its own
	// (decode's re-sends before the first byte), which attempts set in the
	// workflow replace.
	RetryAttempts int
}

// Services are named services a build may use (BuildContext.Services).
// The engine core knows no service type: each name belongs to the package
// that defines its value.
type Services map[string]any

// ServiceUpstream names the upstream worker client (*upstream.Client) in
// Services. It is the one name the core reserves, because LoadOptions
// carries the client under it.
const ServiceUpstream = "upstream"

// Service returns the service of that name as a T: the zero T and false
// when the build has none. A service of another type is a programming error
// of the composition root, reported by panicking (the compiler turns a
// panicking Build into a load error naming the node type).
func Service[T any](b *BuildContext, name string) (T, bool) {
	var zero T
	if b == nil {
		return zero, false
	}
	v, ok := b.Services[name]
	if !ok || v == nil {
		return zero, false
	}
	t, ok := v.(T)
	if !ok {
		panic(fmt.Sprintf("engine: service %q is a %T, not a %T", name, v, zero))
	}
	return t, true
}

// Closer is implemented by nodes that hold something to release when their
// workflow is retired (fetch-media's transports and their idle
// connections). Workflow.Close calls it once per node, after the requests
// that use the workflow drained (or a bounded wait ran out); a request that
// still runs the node afterwards must keep working, so Close releases idle
// resources and must not break the node. Close must be idempotent.
type Closer interface {
	Close() error
}

// Defaults are the workflow-level defaults a node falls back on.
type Defaults struct {
	KVConnector string // "" means kv-shared-storage
	ECConnector string // "" means ec-shared-storage
	TokensIn    bool   // encode and prefill use the generate format
}

// ParamError is a build error located at a JSON pointer inside the node's
// params ("" for the params object itself); the compiler maps it to the YAML
// file:line:col.
type ParamError struct {
	Path string
	Msg  string
	// Rule is the diagnostic's rule id; "" for node/params. A node type
	// uses its own only for a check the rule table defines
	// (loadrules.go), with its fix line.
	Rule string
}

func (e *ParamError) Error() string { return e.Path + ": " + e.Msg }

// ParamErrors is several of them at once.
type ParamErrors []*ParamError

func (e ParamErrors) Error() string {
	if len(e) == 0 {
		return "no errors"
	}
	return fmt.Sprintf("%s (and %d more)", e[0].Error(), len(e)-1)
}

// NodeType is a registered kind of node.
type NodeType struct {
	Name   string // kebab-case, e.g. "conditional-decode"
	Schema []byte // JSON Schema (draft 2020-12) of the params object
	// Doc is a one-line summary for `celflow schema` and errors.
	Doc string
	// FanOut: the type runs once per item of the node's foreach list.
	FanOut bool
	Build  func(b *BuildContext, params json.RawMessage) (Node, error)
}

var (
	regMu    sync.RWMutex
	registry = map[string]NodeType{}
)

// Register adds a node type. It panics on an empty or duplicate name: both
// are programming errors caught the first time the binary starts.
func Register(t NodeType) {
	if t.Name == "" {
		panic("engine: Register with an empty node type name")
	}
	if t.Build == nil {
		panic("engine: node type " + t.Name + " has no Build")
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[t.Name]; dup {
		panic("engine: node type " + t.Name + " registered twice")
	}
	registry[t.Name] = t
}

// LookupType returns the registered type of that name.
func LookupType(name string) (NodeType, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	t, ok := registry[name]
	return t, ok
}

// TypeNames lists the registered type names, sorted.
func TypeNames() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// SlotHolder is a request's admission slot (Run.Slot). ReleaseSlot is
// idempotent.
type SlotHolder interface{ ReleaseSlot() }
