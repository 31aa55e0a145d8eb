// Package decode is the `decode` node type: the terminal leg that generates
// the reply and relays it to the client (docs/protocol.md, Decode and
// Streaming).
package decode

import (
	_ "embed"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/celflow/celflow/connectors/kv"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/replay"
)

//go:embed schema.json
var schemaJSON []byte

// TypeName is the node type's registered name.
const TypeName = "decode"

func init() {
	engine.Register(engine.NodeType{
		Name:   TypeName,
		Schema: schemaJSON,
		Doc:    "terminal decode leg; carries the KV handoff and relays the reply (JSON or SSE)",
		Build:  Build,
	})
}

type params struct {
	TTFBTimeout       string         `json:"ttfb_timeout"`
	StreamIdleTimeout string         `json:"stream_idle_timeout"`
	Aggregated        bool           `json:"aggregated"`
	KVConnector       string         `json:"kv_connector"`
	Fallback          *fallback      `json:"fallback"`
	Failover          *replay.Params `json:"failover"`
}

// fallback is where a decode leg goes when its own pool failed before the
// first response byte on every attempt (a 503, a refused or reset
// connection): another pool, with the same body and KV hand-off.
type fallback struct {
	Pool string `json:"pool"`
}

// DefaultReroutes is how many more times a decode leg that failed before
// its first response byte is sent, the same bytes, to another endpoint (in
// direct mode one it has not tried; through a gateway, the gateway picks
// again) when the workflow gives the node no retry policy. The KV a prefill
// staged for it is still waiting on the prefill worker, so a decode that
// never reached a worker would otherwise strand it until its lease runs
// out. retry.attempts in the workflow (the node's block, else
// defaults.retry) replaces this default.
const DefaultReroutes = 2

// Decode is a built decode node; immutable and safe for concurrent use.
type Decode struct {
	client       *upstream.Client
	ttfb, idle   time.Duration
	writeTimeout time.Duration
	aggregated   bool
	sglang       bool // kv-sglang: bootstrap fields instead of kv_transfer_params
	port         int  // kv-sglang bootstrap port
	// reroutes is leg.Call.Reroute: DefaultReroutes unless the workflow
	// sets the node's retry attempts or the hand-off is kv-sglang's (the
	// prefill waits for one decode by bootstrap room).
	reroutes int
	attempts int           // engine.BuildContext.RetryAttempts
	fallback string        // the fallback pool, "" for none
	fo       replay.Policy // the failover: block (failover.go)
}

// Build validates params and the decode target.
func Build(b *engine.BuildContext, raw json.RawMessage) (engine.Node, error) {
	var p params
	if err := leg.Decode(raw, &p); err != nil {
		return nil, err
	}
	up, _ := engine.Service[*upstream.Client](b, engine.ServiceUpstream)
	n := &Decode{client: up, aggregated: p.Aggregated, writeTimeout: b.WriteTimeout}
	var errs engine.ParamErrors
	add := func(err error) {
		if pe, ok := err.(*engine.ParamError); ok {
			errs = append(errs, pe)
		} else if err != nil {
			errs = append(errs, &engine.ParamError{Msg: err.Error()})
		}
	}
	var err error
	n.ttfb, err = leg.Duration("/ttfb_timeout", p.TTFBTimeout, 0)
	add(err)
	n.idle, err = leg.Duration("/stream_idle_timeout", p.StreamIdleTimeout, 0)
	add(err)
	name, path := p.KVConnector, "/kv_connector"
	if name == "" {
		name, path = b.Defaults.KVConnector, ""
	}
	if c, err := kv.Lookup(name); err != nil {
		add(&engine.ParamError{Path: path, Msg: err.Error()})
	} else if c.Bootstrap() && !p.Aggregated {
		n.sglang = true
		if n.port, err = kv.BootstrapPort(); err != nil {
			add(&engine.ParamError{Path: path, Msg: err.Error()})
		}
	}
	if pol, pe := replay.Build(p.Failover); pe != nil {
		add(pe)
	} else {
		n.fo = pol
	}
	add(leg.RequireRole(b, upstream.RoleDecode))
	n.attempts = b.RetryAttempts
	if n.attempts == 0 && !n.sglang {
		n.reroutes = DefaultReroutes
	}
	if p.Fallback != nil {
		n.fallback = p.Fallback.Pool
		add(checkFallback(up, n.fallback))
		if n.sglang {
			add(&engine.ParamError{Path: "/fallback", Rule: engine.RuleDecodeFallback,
				Msg: "kv-sglang pairs the prefill with one decode by bootstrap room: a decode leg cannot be sent to another pool; remove fallback"})
		}
	}
	switch len(errs) {
	case 0:
		return n, nil
	case 1:
		return nil, errs[0]
	}
	return nil, errs
}

// Contract: decode answers the client whenever it succeeds (terminal: no
// node may follow it) and ends the run. It needs nothing:
// without a prefill the body simply carries no kv_transfer_params, and
// without T no tokens (docs/protocol.md, Decode). Its outputs feed
// metrics (nothing can read them in CEL: nothing follows decode).
func (n *Decode) Contract() engine.Contract {
	c := engine.Contract{Role: string(upstream.RoleDecode), Responds: true, Terminal: true, Outputs: decodeOutputs}
	if n.fo.Enabled() {
		c.Failover = n.fo.String()
	}
	if n.sglang {
		// A kv-sglang decode meets a concurrent prefill in the run's SGLang
		// session (either may make it): declared so the compiler sees the
		// coupling.
		c.Provides = []engine.AnyKey{leg.SGLangSession}
	}
	return c
}

// checkFallback refuses a fallback pool the serve config does not define
// (direct mode; a gateway routes any pool name) and decode's own pool.
// Without an upstream client (plain validate) only the latter is known.
func checkFallback(up *upstream.Client, name string) error {
	if name == string(upstream.RoleDecode) {
		return &engine.ParamError{Path: "/fallback/pool", Rule: engine.RuleDecodeFallback,
			Msg: `the fallback pool is the decode role's own pool ("decode"): its legs already went there; name another pool`}
	}
	if up == nil || up.HasPool(name) {
		return nil
	}
	msg := "no pool named " + strconv.Quote(name) + " in upstream.pools"
	names := up.PoolNames()
	if s := closest(name, names); s != "" {
		msg += " (did you mean " + strconv.Quote(s) + "?)"
	}
	if len(names) > 0 {
		msg += "; pools: " + strings.Join(names, ", ")
	}
	return &engine.ParamError{Path: "/fallback/pool", Rule: engine.RuleDecodeFallback,
		Msg: msg + " (a decode leg that fails before its first byte would have nowhere to fall back to)"}
}

// closest is the name within edit distance 2 of s (the nearest), "" for none.
func closest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// fallbackFor is the fallback pool of one attempt: with a retry policy,
// only its last attempt falls back (the earlier ones are retried first).
func (n *Decode) fallbackFor(x *engine.Exec) string {
	if n.attempts > 1 && x.Attempt < n.attempts {
		return ""
	}
	return n.fallback
}

// ExplainNote says what the decode legs do before their first byte
// (engine.Noter): the re-sends, and the fallback pool.
func (n *Decode) ExplainNote() string {
	var s string
	switch {
	case n.reroutes > 0:
		s = "a leg failing before its first byte (503, connection refused or reset) is sent again up to " +
			strconv.Itoa(n.reroutes) + " more times to another endpoint"
	case n.fallback != "":
		s = "a leg failing before its first byte (503, connection refused or reset)"
		if n.attempts > 1 {
			s += " on the last of " + strconv.Itoa(n.attempts) + " attempts"
		}
	default:
		return ""
	}
	if n.fallback != "" {
		s += ", then to pool " + n.fallback
		if n.reroutes > 0 {
			s += " (" + strconv.Itoa(n.reroutes) + " more there)"
		}
	}
	return s
}

var decodeOutputs = []engine.Output{{Name: "aggregated", Type: "bool"}, {Name: "handover", Type: "duration"}}

var (
	_ engine.Node  = (*Decode)(nil)
	_ engine.Noter = (*Decode)(nil)
)
