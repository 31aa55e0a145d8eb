// Package replay continues a decode reply on another worker when its leg
// breaks after the first byte (docs/operations.md, Failover): the node's
// policy (the decode params' `failover:` block), which requests can be
// continued at all, the continuation request (the prompt's token ids
// followed by the ones already generated, with what is left of the token
// budget), and the relay that keeps one client stream across legs: the same
// id, created and model, chunks in the client's shape, one final chunk, one
// usage counting the whole answer, one [DONE].
package replay

import (
	"strconv"
	"time"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// What broke: the reason label of celflow_failovers_total.
const (
	ReasonReset      = "reset"        // the connection broke or the worker exited mid-reply
	ReasonIdle       = "idle_timeout" // the reply stalled longer than stream_idle_timeout
	ReasonErrorEvent = "error_event"  // the worker sent an error event mid-stream
	ReasonTruncated  = "truncated"    // a non-streamed body ended before it was whole
	ReasonKVPull     = "kv_pull"      // decode could not pull the prefill's KV
)

// Reasons lists every reason, in the order the docs give them.
var Reasons = []string{ReasonReset, ReasonIdle, ReasonErrorEvent, ReasonTruncated, ReasonKVPull}

// What came of it: the outcome label.
const (
	OutcomeContinued = "continued" // another worker took over; the reply went on
	OutcomeFailed    = "failed"    // the replay itself failed (every attempt used up, or none could be made)
	OutcomeBudget    = "budget"    // max_added_time was spent
	OutcomeOff       = "off"       // the policy does not fail over for this reason
	// Refusals: the request cannot be continued exactly; the reply ends
	// abnormally, as without failover.
	RefusedGuided    = "refused_guided"    // response_format json_*, guided_*, structured_outputs
	RefusedN         = "refused_n"         // n or best_of > 1
	RefusedLogprobs  = "refused_logprobs"  // logprobs, top_logprobs, prompt_logprobs, echo
	RefusedTools     = "refused_tools"     // tools in play: a tool call may be in flight
	RefusedReasoning = "refused_reasoning" // reasoning text was in flight (its parser cannot resume)
	RefusedTokenIDs  = "refused_no_token_ids"
	RefusedMedia     = "refused_media"  // multimodal: a token-id prompt cannot carry the features
	RefusedSGLang    = "refused_sglang" // kv-sglang: no token-id continuation path
)

// Policy is a decode node's `failover:` block.
type Policy struct {
	Attempts int             // replays per request; 0 = off
	On       map[string]bool // the reasons that trigger one
	Budget   time.Duration   // max_added_time: the most the replays of one request may add, 0 = no bound
}

// Params is the block as written.
type Params struct {
	Attempts     *int     `json:"attempts"`
	On           []string `json:"on"`
	MaxAddedTime string   `json:"max_added_time"`
}

// DefaultAttempts and DefaultBudget apply when the block is present
// without them.
const (
	DefaultAttempts = 2
	DefaultBudget   = 30 * time.Second
)

// Build resolves the block; nil (absent) is off. Errors carry the JSON
// pointer below the node's params.
func Build(p *Params) (Policy, *engine.ParamError) {
	if p == nil {
		return Policy{}, nil
	}
	pol := Policy{Attempts: DefaultAttempts, Budget: DefaultBudget, On: map[string]bool{}}
	if p.Attempts != nil {
		if *p.Attempts < 0 || *p.Attempts > 10 {
			return Policy{}, &engine.ParamError{Path: "/failover/attempts", Msg: "want 0 (off) to 10"}
		}
		pol.Attempts = *p.Attempts
	}
	on := p.On
	if on == nil {
		on = Reasons
	}
	for i, r := range on {
		known := false
		for _, k := range Reasons {
			known = known || k == r
		}
		if !known {
			return Policy{}, &engine.ParamError{Path: "/failover/on/" + itoa(i), Msg: "unknown reason " + r}
		}
		pol.On[r] = true
	}
	if p.MaxAddedTime != "" {
		d, err := leg.Duration("/failover/max_added_time", p.MaxAddedTime, 0)
		if err != nil {
			if pe, ok := err.(*engine.ParamError); ok {
				return Policy{}, pe
			}
			return Policy{}, &engine.ParamError{Path: "/failover/max_added_time", Msg: err.Error()}
		}
		pol.Budget = d
	}
	return pol, nil
}

// Enabled reports whether the policy ever replays.
func (p Policy) Enabled() bool { return p.Attempts > 0 }

// String is the policy for explain and graph.
func (p Policy) String() string {
	if !p.Enabled() {
		return "off"
	}
	s := "attempts=" + itoa(p.Attempts) + " on="
	first := true
	for _, r := range Reasons {
		if p.On[r] {
			if !first {
				s += ","
			}
			s += r
			first = false
		}
	}
	if p.Budget > 0 {
		s += " max_added_time=" + p.Budget.String()
	}
	return s
}

func itoa(i int) string { return strconv.Itoa(i) }
