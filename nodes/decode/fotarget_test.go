package decode

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
	"github.com/celflow/celflow/nodes/internal/replay"
)

// chatEvents are a two-token chat stream with token ids, and its usage
// chunk (cached_tokens 32 of a 40-token prompt).
const (
	foFirst  = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	foAlfa   = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"alfa"},"logprobs":null,"finish_reason":null,"token_ids":[10]}]}`
	foBravo  = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" bravo"},"logprobs":null,"finish_reason":"length","token_ids":[11]}]}`
	foUsage  = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":32}}}`
	foCont   = `{"id":"cmpl-2","object":"text_completion","created":9,"model":"m","choices":[{"index":0,"text":" bravo","logprobs":null,"finish_reason":"length","token_ids":[11]}]}`
	foCUsage = `{"id":"cmpl-2","object":"text_completion","created":9,"model":"m","choices":[],"usage":{"prompt_tokens":41,"completion_tokens":1,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":40}}}`
)

func fortyIDs() []int64 {
	ids := make([]int64, 40)
	for i := range ids {
		ids[i] = int64(i)
	}
	return ids
}

// With failover on, the cache-aware picker's truth check still reads the
// worker's cached_tokens (leg.TapUsage): a stream that ends normally is
// counted as the plain relay counts it; a stream whose first leg broke is
// not, and neither is its continuation's usage (another prompt on another
// leg: it says nothing about the prediction, which was for the first leg).
// Checked to fail without the tap in relayFailover (no turn counted).
func TestFailoverFeedsTruth(t *testing.T) {
	var cut atomic.Bool
	w := legtest.NewWorker(t, func(rw http.ResponseWriter, r *http.Request, c legtest.Call) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(rw)
		ev := func(s string) { _, _ = rw.Write([]byte("data: " + s + "\n\n")); _ = rc.Flush() }
		if r.URL.Path == "/v1/completions" { // the continuation
			ev(foCont)
			ev(foCUsage)
			ev("[DONE]")
			return
		}
		ev(foFirst)
		ev(foAlfa)
		if cut.Load() {
			panic(http.ErrAbortHandler) // the worker dies mid-stream
		}
		ev(foBravo)
		ev(foUsage)
		ev("[DONE]")
	})
	c := legtest.Direct(t, upstream.Config{Picker: "cache-aware", Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: w.URL}}}})
	n := newNode(t, c, `{"failover":{"attempts":1}}`)
	const body = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`
	for turn := range 3 {
		cut.Store(turn == 2)
		run, rec := legtest.Run(t, engine.RouteChat, body, nil)
		run.Req.Stream = true
		run.State.Tokens = engine.Tokens{Known: true, IDs: fortyIDs()}
		res := n.Run(context.Background(), legtest.Exec(run, "decode"))
		if res.Err != nil || !res.Responded {
			t.Fatalf("turn %d: result %+v", turn, res)
		}
		if got := rec.Body.String(); !strings.Contains(got, `"content":" bravo"`) || !strings.Contains(got, `"cached_tokens"`) || !strings.HasSuffix(got, "data: [DONE]\n\n") {
			t.Fatalf("turn %d: the client got\n%s", turn, got)
		}
		if want := 0; turn == 2 {
			want = 1
			if len(res.Failovers) != want || res.Failovers[0].Outcome != replay.OutcomeContinued {
				t.Fatalf("turn %d: failovers %+v", turn, res.Failovers)
			}
		} else if len(res.Failovers) != want {
			t.Fatalf("turn %d: failovers %+v", turn, res.Failovers)
		}
	}
	st := c.RouteStats()
	// Turn 0 predicted nothing and the worker said 32 (fn); turn 1
	// predicted 32 (2 blocks, the last token never counts) and got 32 (tp);
	// turn 2 broke and is not counted.
	if len(st) != 1 || st[0].FN != 1 || st[0].TP != 1 || st[0].FP != 0 || st[0].TN != 0 || st[0].ReportedTokens != 64 {
		t.Fatalf("route stats %+v", st)
	}
}

// A target rule's stream_idle_timeout bounds the failover relay's legs as
// it bounds the plain relay: a first leg that stalls longer than the rule
// allows (the node's own stream_idle_timeout is none) is a break of reason
// idle_timeout, and the reply goes on from a continuation. Checked to fail
// without the fix (the stall lasted until the request's deadline).
func TestFailoverTargetStreamIdle(t *testing.T) {
	release := make(chan struct{})
	w := legtest.NewWorker(t, func(rw http.ResponseWriter, r *http.Request, c legtest.Call) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(rw)
		ev := func(s string) { _, _ = rw.Write([]byte("data: " + s + "\n\n")); _ = rc.Flush() }
		if r.URL.Path == "/v1/completions" {
			ev(foCont)
			ev("[DONE]")
			return
		}
		ev(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":[1,2,3]}`)
		ev(foAlfa)
		select { // stalls until celflow gives up on it
		case <-r.Context().Done():
		case <-release:
		}
	})
	// Without the rule's bound the stall would last as long as the test: the
	// worker gives up after 5 s (a reset, not an idle_timeout, then).
	stop := time.AfterFunc(5*time.Second, func() { close(release) })
	t.Cleanup(func() {
		if stop.Stop() {
			close(release)
		}
	})
	n := newNode(t, legtest.Gateway(t, w.URL), `{"failover":{"attempts":1}}`)
	run, rec := legtest.Run(t, engine.RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0,"stream":true}`, nil)
	run.Req.Stream = true
	x := legtest.Exec(run, "decode")
	idle := 200 * time.Millisecond
	x.Target = &engine.LegTarget{Rule: 0, StreamIdle: &idle}
	start := time.Now()
	res := n.Run(context.Background(), x)
	if res.Err != nil || !res.Responded {
		t.Fatalf("result %+v after %s", res, time.Since(start))
	}
	if len(res.Failovers) != 1 || res.Failovers[0].Reason != replay.ReasonIdle || res.Failovers[0].Outcome != replay.OutcomeContinued {
		t.Fatalf("failovers %+v", res.Failovers)
	}
	if got := rec.Body.String(); !strings.Contains(got, `"content":" bravo"`) || !strings.HasSuffix(got, "data: [DONE]\n\n") {
		t.Fatalf("the client got\n%s", got)
	}
}
