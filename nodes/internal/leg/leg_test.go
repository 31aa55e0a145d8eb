package leg_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

func sendTo(t *testing.T, ctx context.Context, base string, ttfb time.Duration) (*http.Response, *engine.Error) {
	t.Helper()
	run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
	x := legtest.Exec(run, "prefill")
	c := legtest.Gateway(t, base)
	l := leg.NewLeg(x, upstream.RolePrefill, "/v1/chat/completions", jsonb.Raw([]byte(`{"a":1}`)), ttfb)
	return leg.Send(ctx, x, c, base, l)
}

func withHeader(k, v string, h func(http.ResponseWriter, *http.Request, legtest.Call)) func(http.ResponseWriter, *http.Request, legtest.Call) {
	return func(w http.ResponseWriter, r *http.Request, c legtest.Call) {
		w.Header().Set(k, v)
		h(w, r, c)
	}
}

// ACCEPTANCE 109, 110, 142, 152, 195, 196, 197, 199 (503 → 503 with
// Retry-After and a 4xx param kept: PROTOCOL 12 as changed this round)
func TestSendClassifies(t *testing.T) {
	long := strings.Repeat("é", 10<<10) // 20 KiB message
	dead := legtest.NewWorker(t, nil)
	deadURL := dead.URL
	dead.Close()
	for _, tc := range []struct {
		name      string
		handle    func(http.ResponseWriter, *http.Request, legtest.Call)
		base      string
		ttfb      time.Duration
		kind      engine.Kind
		status    int
		upMsg     string
		clientHas string
		clientNot string
		param     string
		retry     int // Retry-After of the error (seconds)
	}{
		{name: "422 openai error", handle: legtest.JSON(422, `{"error":{"message":"max_tokens must be positive","type":"x"}}`),
			kind: engine.KindUpstreamRejected, status: 422, upMsg: "max_tokens must be positive",
			clientHas: "prefill rejected the request: HTTP 422: max_tokens must be positive (request_id: req-1)"},
		{name: "400 vllm flat error", handle: legtest.JSON(400, `{"object":"error","message":"bad","code":400}`),
			kind: engine.KindUpstreamRejected, status: 400, upMsg: "bad"},
		{name: "400 html", handle: legtest.JSON(400, `<html>SECRET-MARKER</html>`),
			kind: engine.KindUpstreamRejected, status: 400, clientNot: "SECRET-MARKER"},
		{name: "400 long message cut", handle: legtest.JSON(400, `{"error":{"message":"`+long+`"}}`),
			kind: engine.KindUpstreamRejected, status: 400},
		{name: "503", handle: legtest.JSON(503, `{"error":{"message":"SECRET-MARKER"}}`),
			kind: engine.KindUpstreamUnavailable, status: 503, clientNot: "SECRET-MARKER", retry: 1},
		{name: "503 retry-after kept", handle: withHeader("Retry-After", "12", legtest.JSON(503, `{}`)),
			kind: engine.KindUpstreamUnavailable, status: 503, retry: 12},
		{name: "503 retry-after date", handle: withHeader("Retry-After", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat), legtest.JSON(503, `{}`)),
			kind: engine.KindUpstreamUnavailable, status: 503, retry: -90},
		{name: "503 retry-after negative", handle: withHeader("Retry-After", "-5", legtest.JSON(503, `{}`)),
			kind: engine.KindUpstreamUnavailable, status: 503, retry: 1},
		{name: "500", handle: legtest.JSON(500, `{"error":{"message":"SECRET-MARKER"}}`),
			kind: engine.KindBadGateway, status: 500, clientNot: "SECRET-MARKER"},
		{name: "429 keeps retry-after", handle: withHeader("Retry-After", "4", legtest.JSON(429, `{"error":{"message":"slow down"}}`)),
			kind: engine.KindUpstreamRejected, status: 429, upMsg: "slow down", retry: 4},
		{name: "429 bogus retry-after dropped", handle: withHeader("Retry-After", "soon", legtest.JSON(429, `{}`)),
			kind: engine.KindUpstreamRejected, status: 429},
		{name: "400 nested param", handle: legtest.JSON(400, `{"error":{"param":"messages","message":"context too long","type":"BadRequestError"}}`),
			kind: engine.KindUpstreamRejected, status: 400, upMsg: "context too long", param: "messages"},
		{name: "400 flat param", handle: legtest.JSON(400, `{"object":"error","message":"context too long","type":"BadRequestError","param":"messages","code":400}`),
			kind: engine.KindUpstreamRejected, status: 400, upMsg: "context too long", param: "messages"},
		{name: "400 non-string param", handle: legtest.JSON(400, `{"error":{"message":"m","param":{"x":1}}}`),
			kind: engine.KindUpstreamRejected, status: 400, upMsg: "m"},
		{name: "400 param without message", handle: legtest.JSON(400, `{"error":{"param":"messages"}}`),
			kind: engine.KindUpstreamRejected, status: 400},
		{name: "transport", base: deadURL, kind: engine.KindBadGateway, clientHas: "prefill: upstream unreachable"},
		{name: "ttfb", handle: func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}, ttfb: 50 * time.Millisecond, kind: engine.KindUpstreamTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.base
			if base == "" {
				base = legtest.NewWorker(t, tc.handle).URL
			}
			resp, e := sendTo(t, context.Background(), base, tc.ttfb)
			if e == nil {
				t.Fatalf("no error, status %d", resp.StatusCode)
			}
			e.Node = "prefill"
			if e.Kind != tc.kind || e.Status != tc.status {
				t.Fatalf("got kind %d status %d (%v)", e.Kind, e.Status, e)
			}
			if tc.status != 0 && (resp == nil || resp.StatusCode != tc.status) {
				t.Fatalf("resp not returned with the status")
			}
			if tc.upMsg != "" && e.UpstreamMsg != tc.upMsg {
				t.Fatalf("upstream msg %q", e.UpstreamMsg)
			}
			if e.Param != tc.param {
				t.Fatalf("param %q, want %q", e.Param, tc.param)
			}
			if want := tc.retry; (want >= 0 && e.RetryAfter != want) || (want < 0 && (e.RetryAfter < -want-2 || e.RetryAfter > -want+1)) {
				t.Fatalf("Retry-After %d, want %d", e.RetryAfter, tc.retry) // negative: about -want (an HTTP-date)
			}
			if len(e.UpstreamMsg) > 512 {
				t.Fatalf("upstream msg is %d bytes", len(e.UpstreamMsg))
			}
			msg := e.ClientMessage("req-1")
			if tc.clientHas != "" && !strings.Contains(msg, tc.clientHas) {
				t.Fatalf("client message %q", msg)
			}
			if tc.clientNot != "" && strings.Contains(msg+e.Error(), tc.clientNot) {
				t.Fatalf("upstream body leaked: %q", msg)
			}
		})
	}
}

func TestSendCancelled(t *testing.T) {
	w := legtest.NewWorker(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, e := sendTo(t, ctx, w.URL, 0); e == nil || e.Kind != engine.KindCancelled {
		t.Fatalf("got %v", e)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, e := sendTo(t, ctx, w.URL, 0); e == nil || e.Kind != engine.KindDeadline {
		t.Fatalf("got %v", e)
	}
}

// ACCEPTANCE 198, 97-style: any 2xx with JSON is fine; 204 or non-JSON is 502.
func TestReadJSON(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handle func(http.ResponseWriter, *http.Request, legtest.Call)
		ok     bool
	}{
		{"201 json", legtest.JSON(201, `{"a":1}`), true},
		{"204", func(w http.ResponseWriter, _ *http.Request, _ legtest.Call) { w.WriteHeader(204) }, false},
		{"200 text", legtest.JSON(200, `hello`), false},
		{"200 empty", legtest.JSON(200, ``), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := legtest.NewWorker(t, tc.handle)
			resp, e := sendTo(t, context.Background(), w.URL, 0)
			if e != nil {
				t.Fatal(e)
			}
			b, e := leg.ReadJSON(nil, resp, 1<<20)
			if tc.ok != (e == nil) {
				t.Fatalf("body %q err %v", b, e)
			}
			if e != nil && (e.Kind != engine.KindBadGateway || !strings.Contains(e.Msg, "unparseable")) {
				t.Fatalf("err %v", e)
			}
		})
	}
}

func TestFail(t *testing.T) {
	if r := leg.Fail(0, nil); r.Err != nil {
		t.Fatal("typed nil leaked into Result.Err")
	}
	e := engine.Errorf(engine.KindBadGateway, "x")
	if r := leg.Fail(503, e); r.Err != e || r.HTTPStatus != 503 {
		t.Fatalf("%+v", r)
	}
}

// Tracing on: the leg carries our span as parent; off: nothing is invented.
func TestTraceHeaders(t *testing.T) {
	run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
	x := legtest.Exec(run, "decode")
	if h := leg.TraceHeaders(x); h != nil {
		t.Fatalf("no span: %v", h)
	}
	_, x.Span = noop.NewTracerProvider().Tracer("t").Start(context.Background(), "n")
	if h := leg.TraceHeaders(x); h != nil {
		t.Fatalf("noop span: %v", h)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())
	var span trace.Span
	_, span = tp.Tracer("t").Start(context.Background(), "n")
	defer span.End()
	x.Span = span
	h := leg.TraceHeaders(x)
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if h.Get("Traceparent") != want {
		t.Fatalf("traceparent %q want %q", h.Get("Traceparent"), want)
	}
	// It reaches the worker in place of the client's.
	w := legtest.NewWorker(t, nil)
	run.Req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	l := leg.NewLeg(x, upstream.RoleDecode, "/v1/chat/completions", jsonb.Raw([]byte(`{}`)), 0)
	resp, e := leg.Send(context.Background(), x, legtest.Gateway(t, w.URL), w.URL, l)
	if e != nil {
		t.Fatal(e)
	}
	resp.Body.Close()
	if got := w.Calls()[0].Header.Values("Traceparent"); len(got) != 1 || got[0] != want {
		t.Fatalf("worker got traceparent %v", got)
	}
}

func TestDecodeParams(t *testing.T) {
	var p struct {
		A string `json:"a"`
		B bool   `json:"b"`
	}
	for _, tc := range []struct {
		in, path string
	}{
		{`{"a":"x","zzz":1}`, "/zzz"},
		{`{"b":"true"}`, "/b"},
		{`{"a":42}`, "/a"},
	} {
		err := leg.Decode([]byte(tc.in), &p)
		var pe *engine.ParamError
		if !errors.As(err, &pe) || pe.Path != tc.path {
			t.Errorf("%s: %v", tc.in, err)
		}
	}
	if err := leg.Decode(nil, &p); err != nil {
		t.Fatal(err)
	}
	// Fields of an embedded struct are the params' own (leg.BodyParams).
	var q struct {
		A string `json:"a"`
		leg.BodyParams
	}
	if err := leg.Decode([]byte(`{"a":"x","idle_timeout":"5s"}`), &q); err != nil || q.IdleTimeout != "5s" {
		t.Fatalf("embedded field: %v %+v", err, q)
	}
	var pe *engine.ParamError
	if err := leg.Decode([]byte(`{"a":"x","idle":"5s"}`), &q); !errors.As(err, &pe) || pe.Path != "/idle" {
		t.Fatalf("unknown beside an embedded struct: %v", err)
	}
}

// ACCEPTANCE 23
func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"30s", 30 * time.Second, false}, {"1m30s", 90 * time.Second, false}, {"0", 0, false}, {"", 7, false},
		{"30", 0, true}, {"abc", 0, true}, {"-1s", 0, true},
	} {
		got, err := leg.Duration("/t", tc.in, 7)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Duration(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// ACCEPTANCE 168: the room is an integer in [0, 2^63-1], different across requests.
func TestSessionShared(t *testing.T) {
	seen := map[uint64]bool{}
	for i := 0; i < 1000; i++ {
		run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
		a := leg.Session(legtest.Exec(run, "prefill"), nil, 8998)
		b := leg.Session(legtest.Exec(run, "decode"), nil, 8998)
		if a != b || a.Room > 1<<63-1 || a.Port != 8998 {
			t.Fatalf("session not shared or room out of range: %+v %+v", a, b)
		}
		seen[a.Room] = true
	}
	if len(seen) < 999 {
		t.Fatalf("rooms repeat: %d distinct of 1000", len(seen))
	}
}

func TestSessionPrefillFailure(t *testing.T) {
	run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
	s := leg.Session(legtest.Exec(run, "p"), nil, 1)
	ctx, cancel := context.WithCancelCause(context.Background())
	if e := s.JoinDecode(cancel); e != nil {
		t.Fatal(e)
	}
	pe := engine.Errorf(engine.KindBadGateway, "boom")
	if !s.PrefillFailed("prefill", pe) {
		t.Fatal("decode not cancelled")
	}
	if ctx.Err() == nil || s.PrefillErr().Node != "prefill" || pe.Node != "" {
		t.Fatalf("ctx %v, err %+v", ctx.Err(), s.PrefillErr())
	}
	if s.DecodeStarted() == nil {
		t.Fatal("decode started after prefill failed")
	}
	// After decode's reply started, a failure is only recorded.
	run2, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
	s2 := leg.Session(legtest.Exec(run2, "p"), nil, 1)
	_ = s2.JoinDecode(func(error) { t.Fatal("decode cancelled after its reply started") })
	if s2.DecodeStarted() != nil || s2.PrefillFailed("prefill", pe) || s2.PrefillErr() != nil {
		t.Fatal("late prefill failure must only be recorded")
	}
}

// FIELD-NOTES 4: a retry goes to another endpoint when there is one.
func TestPickForRetryAvoidsEndpoint(t *testing.T) {
	c := legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RolePrefill: {{URL: "http://127.0.0.1:1"}, {URL: "http://127.0.0.1:2"}}}})
	for i := 0; i < 10; i++ {
		run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
		x := legtest.Exec(run, "prefill")
		first, e := leg.PickFor(x, c, upstream.RolePrefill)
		if e != nil {
			t.Fatal(e)
		}
		first.Done(false)
		x.Attempt = 2
		second, _ := leg.PickFor(x, c, upstream.RolePrefill)
		second.Done(false)
		if second.Endpoint.URL == first.Endpoint.URL {
			t.Fatalf("retry went to the same endpoint %s", first.Endpoint.URL)
		}
	}
}

// The body is indexed once per run and version: legs of one request share it.
func TestParseBodyCached(t *testing.T) {
	run, _ := legtest.Run(t, engine.RouteChat, `{"a":1}`, nil)
	x := legtest.Exec(run, "n")
	a, e := leg.ParseBody(x, run.State.Body)
	if e != nil {
		t.Fatal(e)
	}
	if b, _ := leg.ParseBody(legtest.Exec(run, "m"), run.State.Body); b != a {
		t.Fatal("same body parsed twice")
	}
	run.State.Body = []byte(`{"a":1}`) // a new version (e.g. rewritten by fetch-media)
	if c, _ := leg.ParseBody(x, run.State.Body); c == a || c.Buf[0] != '{' {
		t.Fatal("a changed body must be indexed anew")
	}
	if _, e := leg.ParseBody(x, []byte(`[1]`)); e == nil || e.Kind != engine.KindInvalidJSON {
		t.Fatalf("got %v", e)
	}
}
