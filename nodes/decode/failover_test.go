package decode

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
	"github.com/celflow/celflow/nodes/internal/replay"
)

// A decode-only stream that breaks after two tokens is continued by a
// /v1/completions leg whose prompt is the prompt's ids and the two
// generated ones, with the budget left; the client gets one chat stream;
// the failover is recorded with its stall and is a span, a child of the
// decode span and linked to it.
func TestFailoverContinuesAStream(t *testing.T) {
	var legs []string
	w := legtest.NewWorker(t, func(rw http.ResponseWriter, r *http.Request, c legtest.Call) {
		legs = append(legs, r.URL.Path+" "+string(c.Body))
		rw.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(rw)
		ev := func(s string) { _, _ = rw.Write([]byte("data: " + s + "\n\n")); _ = rc.Flush() }
		if len(legs) == 1 {
			ev(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":[1,2,3]}`)
			ev(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"alfa"},"logprobs":null,"finish_reason":null,"token_ids":[10]}]}`)
			ev(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" bravo"},"logprobs":null,"finish_reason":null,"token_ids":[11]}]}`)
			panic(http.ErrAbortHandler) // the worker dies mid-stream
		}
		ev(`{"id":"cmpl-2","object":"text_completion","created":9,"model":"m","choices":[{"index":0,"text":" charlie","logprobs":null,"finish_reason":null,"prompt_token_ids":[1,2,3,10,11],"token_ids":[12]}]}`)
		ev(`{"id":"cmpl-2","object":"text_completion","created":9,"model":"m","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}]}`)
		ev(`[DONE]`)
	})
	n := newNode(t, legtest.Gateway(t, w.URL), `{"failover":{"attempts":1}}`)
	run, rec := legtest.Run(t, engine.RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0,"stream":true}`, nil)
	run.Req.Stream = true
	x := legtest.Exec(run, "decode")
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	ctx, span := tp.Tracer("t").Start(context.Background(), "decode")
	x.Span = span
	res := n.Run(ctx, x)
	span.End()
	if res.Err != nil || !res.Responded {
		t.Fatalf("result: %+v", res)
	}
	if len(legs) != 2 || !strings.HasPrefix(legs[0], "/v1/chat/completions ") || !strings.Contains(legs[0], `"return_token_ids":true`) ||
		legs[1] != `/v1/completions {"model":"m","max_tokens":1,"temperature":0,"stream":true,"prompt":[1,2,3,10,11],"return_token_ids":true}` {
		t.Fatalf("legs:\n%s", strings.Join(legs, "\n"))
	}
	want := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"alfa"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" bravo"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" charlie"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}

data: [DONE]

`
	if rec.Body.String() != want {
		t.Fatalf("client got\n%s\nwant\n%s", rec.Body.String(), want)
	}
	if len(res.Failovers) != 1 || res.Failovers[0].Reason != replay.ReasonReset || res.Failovers[0].Outcome != replay.OutcomeContinued || res.Failovers[0].Stall <= 0 {
		t.Fatalf("failovers %+v", res.Failovers)
	}
	var fo sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "decode failover" {
			fo = s
		}
	}
	if fo == nil || fo.Parent().SpanID() != span.SpanContext().SpanID() || len(fo.Links()) != 1 || fo.Links()[0].SpanContext.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("failover span %v", fo)
	}
	attrs := map[string]string{}
	for _, a := range fo.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["celflow.failover.reason"] != "reset" || attrs["celflow.failover.tokens_before"] != "2" || attrs["celflow.failover.stall_ms"] == "" {
		t.Fatalf("failover span attributes %v", attrs)
	}
}

// Without a failover block the same break ends the reply abnormally, as
// before, and nothing is recorded.
func TestFailoverOff(t *testing.T) {
	w := legtest.NewWorker(t, func(rw http.ResponseWriter, r *http.Request, c legtest.Call) {
		if strings.Contains(string(c.Body), "return_token_ids") {
			t.Error("token ids asked for with failover off")
		}
		rw.Header().Set("Content-Type", "text/event-stream")
		_, _ = rw.Write([]byte(`data: {"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"))
		_ = http.NewResponseController(rw).Flush()
		panic(http.ErrAbortHandler)
	})
	n := newNode(t, legtest.Gateway(t, w.URL), `{}`)
	run, _ := legtest.Run(t, engine.RouteChat, `{"model":"m","messages":[],"stream":true}`, nil)
	run.Req.Stream = true
	res := n.Run(context.Background(), legtest.Exec(run, "decode"))
	if res.Err == nil || !res.Responded || len(res.Failovers) != 0 {
		t.Fatalf("result %+v", res)
	}
}
