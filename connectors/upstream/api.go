// Package upstream sends worker and render legs: to an Inference Gateway
// (one base URL, routed by EPP-Profile) or to static pools that celflow picks
// from (direct mode), with keep-alive pools sized for the fan-out, passive
// health, and the header rules of docs/protocol.md (Headers).
//
// This file is the contract other packages code against. Implementation
// lives beside it.
package upstream

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/celflow/celflow/internal/tlsfiles"
)

// Role is a worker role; it is also the EPP-Profile value of the leg.
type Role string

const (
	RoleEncode  Role = "encode"
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// Config is the `upstream:` section of the serve config.
type Config struct {
	Mode    string // "gateway" or "direct"
	Gateway string // base URL, gateway mode
	// Render is the render service's base URL, the default for render nodes
	// that name no address of their own (render is a side service in either mode).
	Render string
	// Pools, direct mode: role → endpoints.
	Pools map[Role][]Endpoint
	// Picker: "round-robin" (default), "least-in-flight" or "cache-aware"
	// (decode and named pools scored by cached prefix and load: Routing).
	Picker string
	// Routing tunes the cache-aware picker and the truth check of its
	// predictions (upstream.routing; score.go).
	Routing Routing
	// Passive health (direct mode): eject an endpoint after FailureThreshold
	// consecutive transport failures or 5xx, for EjectFor. Never the last
	// healthy endpoint of a role. Slowness never ejects.
	FailureThreshold int           // default 3
	EjectFor         time.Duration // default 10s
	// Connection pool (docs/configuration.md, upstream.connections).
	IdleConnTimeout     time.Duration // default 4s, below uvicorn's 5s keep-alive
	MaxIdleConnsPerHost int           // default 256
	MaxConnsPerHost     int           // default 0 (no cap)
	// Conditional decode in direct mode: celflow plays the endpoint picker.
	// A prompt with at most ShortPromptTokens tokens is served by decode alone
	// (predicted hit); otherwise a hit needs the prompt's prefix to have been
	// sent to the chosen decode endpoint before (bounded prefix index).
	ShortPromptTokens int // default 0 (off)
	PrefixBlockTokens int // tokens per hashed block, default 16
	PrefixIndexSize   int // entries per decode endpoint, default 10000
	// OwnedHeaders are header names the operator adds to the built-in
	// OwnedHeaders (trust.owned_headers): a client's value never reaches a leg.
	OwnedHeaders []string
	// TLS is how https:// bases are verified and which client certificate
	// celflow shows them (upstream.tls); the zero value is the system roots.
	TLS tlsfiles.ClientConfig
	// Models, when set, is what GET /v1/models lists, without asking the
	// workers or the gateway (upstream.models).
	Models []string
}

// Endpoint is one worker of a direct pool.
type Endpoint struct {
	URL string
	// BootstrapPort is the SGLang bootstrap port of a prefill worker (0: unset).
	BootstrapPort int
}

// Client sends legs. It is safe for concurrent use.
type Client struct {
	impl *client

	// OnLeg, when set, is called once per Send with the leg's role, the
	// response status (0 when there was none), the time until response
	// headers or failure, and the error Send returns. It is the metrics hook;
	// set it before the first Send. Nil by default.
	OnLeg func(role Role, status int, dur time.Duration, err error)
}

// New builds a client; Validate-style errors name the offending key.
func New(cfg Config) (*Client, error) { return newClient(cfg) }

// HasRole reports whether a leg of that role has somewhere to go.
func (c *Client) HasRole(r Role) bool { return c.impl.hasRole(r) }

// InFlight is the number of legs of role r picked and not yet Done (the
// async dispatcher's capacity gate reads it).
func (c *Client) InFlight(r Role) int64 { return c.impl.inFlight(r) }

// Render returns the configured render service base URL ("" when unset).
func (c *Client) Render() string { return c.impl.render }

// Direct reports direct mode (celflow picks endpoints).
func (c *Client) Direct() bool { return c.impl.direct }

// Target is where one leg goes: the gateway, or one picked endpoint.
// Call Done exactly once when the leg is over.
type Target struct {
	Base     string    // base URL without trailing slash
	Endpoint *Endpoint // nil for the gateway
	Host     string    // the endpoint's host (no port), for SGLang bootstrap_host
	// Route is how the cache-aware picker (or a predicted conditional-decode
	// hit) chose this endpoint; nil when no prediction was made.
	Route *RouteInfo
	done  func(failed bool)
	ep    *endpoint // the picked endpoint, nil for the gateway
	epoch uint32    // ep's drain epoch when picked (health.go)
	// key is the CacheKey (without its tokens) the target was picked or
	// predicted for: RecordPrefix names the blocks it records under its
	// adapter and media items (cachekey.go).
	key     CacheKey
	unnamed bool // picked before the pool's adapter list was known: RecordPrefix records nothing
}

// Done releases the target: in-flight accounting and passive health
// (failed: transport failure or 5xx).
func (t *Target) Done(failed bool) {
	if t.done != nil {
		if !failed && t.ep != nil {
			t.ep.answered(t.epoch)
		}
		t.done(failed)
		t.done = nil
	}
}

// Pick chooses a target for a role, skipping excluded endpoint URLs when it
// can (a retry goes to another endpoint).
func (c *Client) Pick(r Role, exclude ...string) (*Target, error) { return c.impl.pick(r, exclude) }

// PredictHit decides a direct-mode conditional decode without a network
// call: hit means send the leg to the returned target (already picked);
// a miss returns a nil target. tokens may be nil when T is unknown.
func (c *Client) PredictHit(tokens []int64) (t *Target, hit bool) { return c.impl.predictHit(tokens) }

// RecordPrefix notes that a prompt was sent to a decode endpoint, so a later
// prompt with the same prefix is predicted a hit there.
func (c *Client) RecordPrefix(t *Target, tokens []int64) { c.impl.recordPrefix(t, tokens) }

// Leg is one POST to a worker or to render.
type Leg struct {
	Role   Role   // "" for render (no EPP-Profile)
	Path   string // e.g. /v1/chat/completions
	Body   io.Reader
	Length int64
	Header http.Header // the client's headers, filtered here per docs/protocol.md
	ReqID  string
	Prefer bool          // Prefer: if-available (conditional decode)
	TTFB   time.Duration // time to first response byte, 0 = none
	Relay  bool          // decode/conditional-decode: forward client Accept-Encoding, keep the body compressed
	Trace  http.Header   // traceparent/tracestate to set (from the node's span), nil to forward the client's
	// Extra are server-owned headers set after the client's were filtered
	// (they win over a client header of the same name); nil for none.
	Extra http.Header
	// TargetHeader is a workflow's target rule's headers (canonical
	// names), set after everything else, celflow's own stamps included, so
	// a rule may replace EPP-Profile (a custom scheduling profile) or the
	// objective; upstream.PoolHeader in gateway mode. Shared: never modified.
	TargetHeader http.Header
	// TargetDrop names headers (canonical) a target rule of the node may
	// set: the client's values of them are never forwarded.
	TargetDrop []string
	// NewBody returns a fresh reader over the same bytes as Body. It allows
	// the one resend of a leg that failed on a stale keep-alive connection
	// (one the worker closed while idle). Nil is fine when Body is a *bytes.Reader,
	// *bytes.Buffer or *strings.Reader that has not been read yet; otherwise
	// a nil NewBody means no resend.
	NewBody func() io.Reader
	// Idle and BodyTimeout bound reading a reply's body once its headers
	// arrived: the longest silence between two body bytes, and the whole
	// body (counted from the headers); 0 = none. For the legs whose reply
	// celflow reads whole. A Relay leg's 2xx body is never bounded by them
	// (relayed streams have stream_idle_timeout and no total); its non-2xx
	// body, which celflow reads, is. Expiry makes the body's Read fail with
	// a *TimeoutError (Phase "idle" or "body"). ReleaseBodyBounds lifts them
	// once celflow decides to relay a body it began to read.
	Idle        time.Duration
	BodyTimeout time.Duration
	// Probe: a Relay leg whose 2xx celflow reads the start of before it
	// decides to relay it (worker-mode conditional decode): Idle and
	// BodyTimeout bound that 2xx too, until ReleaseBodyBounds.
	Probe bool
}

// Send posts the leg to target base. Errors are *TransportError (before any
// response) or *TimeoutError (TTFB expired); ctx cancellation returns ctx.Err().
// A non-2xx response is returned as is; the caller classifies it.
func (c *Client) Send(ctx context.Context, base string, leg *Leg) (*http.Response, error) {
	return c.impl.send(ctx, base, leg, c.OnLeg)
}

// TransportError is a failure before any response byte arrived.
type TransportError struct{ Err error }

func (e *TransportError) Error() string { return "transport: " + e.Err.Error() }
func (e *TransportError) Unwrap() error { return e.Err }

// TimeoutError is an expired time-to-first-byte (Phase ""), or, while a
// body is read, an expired Leg.Idle ("idle") or Leg.BodyTimeout ("body").
type TimeoutError struct {
	After time.Duration
	Phase string
}

// Phases of a TimeoutError.
const (
	PhaseIdle = "idle"
	PhaseBody = "body"
)

func (e *TimeoutError) Error() string {
	switch e.Phase {
	case PhaseIdle:
		return "reply body stalled: no byte for " + e.After.String()
	case PhaseBody:
		return "reply body not complete within " + e.After.String()
	}
	return "no response within " + e.After.String()
}

// ErrorInfo reads a non-2xx response for classification: it reads at most
// 8 KiB (decompressing when needed) for the logs, and extracts an
// OpenAI-style error message ({"error":{"message":…}} or vLLM's flat
// {"object":"error","message":…}) cut to 512 bytes on a UTF-8 boundary.
// It closes the body.
func ErrorInfo(resp *http.Response) (msg string, logBody []byte) { return errorInfo(resp) }

// ReadBody reads a 2xx body whole (decompressing when needed), at most limit
// bytes, and closes it.
func ReadBody(resp *http.Response, limit int64) ([]byte, error) { return readBody(resp, limit) }

// Relay copies a response to the client: status, headers minus hop-by-hop,
// x-request-id set to reqID; the body flows chunk by chunk, each flushed as it
// arrives, never parsed or buffered. idle > 0 bounds the silence between two
// chunks. A mid-body failure returns an error after the status was sent: the
// caller must then end the reply abnormally (panic(http.ErrAbortHandler)).
func Relay(w http.ResponseWriter, resp *http.Response, reqID string, idle time.Duration) (n int64, err error) {
	return relay(w, resp, RelayOptions{ReqID: reqID, Idle: idle})
}

// RelayOptions tune RelayWith.
type RelayOptions struct {
	ReqID string        // canonical id, set as X-Request-Id
	Idle  time.Duration // longest silence between two body chunks, 0 = none
	// Stream marks the reply as streaming although the upstream did not
	// answer text/event-stream (the client asked stream:true).
	Stream bool
	// WriteTimeout bounds writing a non-streaming reply, counted from the
	// moment Relay starts writing (docs/protocol.md, Timeouts); 0 means no deadline (the
	// server's, counted from the request's arrival, is cleared either way).
	// Streaming replies never get a write deadline.
	WriteTimeout time.Duration
}

// RelayWith is Relay with write-timeout handling and an explicit streaming
// flag; the same contract otherwise.
func RelayWith(w http.ResponseWriter, resp *http.Response, o RelayOptions) (n int64, err error) {
	return relay(w, resp, o)
}
