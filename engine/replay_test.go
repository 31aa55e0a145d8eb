package engine_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/celflow/celflow/engine"
)

// rerunKey is what the test's provider hands the caller: the attempt it
// ran as and the body of the run it ran on.
var rerunKey = engine.NewKey[rerunMark]("t-rerun-mark")

type rerunMark struct {
	attempt int
	body    string
}

type rerunProvider struct{}

func (rerunProvider) Contract() engine.Contract {
	return engine.Contract{Provides: []engine.AnyKey{rerunKey}}
}

func (rerunProvider) Run(_ context.Context, x *engine.Exec) engine.Result {
	rerunKey.Set(x.Run, rerunMark{attempt: x.Attempt, body: string(x.Run.State.Body)})
	if string(x.Run.State.Body) == `{"fail":true}` {
		return engine.Result{Err: engine.Errorf(engine.KindBadGateway, "provider failed")}
	}
	return engine.Result{}
}

// rerunCaller re-runs the provider of rerunKey on a replacement run and
// on its own run, and records what it saw.
type rerunCaller struct{ seen *rerunSeen }

type rerunSeen struct {
	mu                sync.Mutex
	okNew, okSame     bool
	node              string
	newMark, sameMark rerunMark
	failErr           error
	missingOK         bool
}

var otherKey = engine.NewKey[int]("t-rerun-nobody")

func (rerunCaller) Contract() engine.Contract {
	return engine.Contract{Needs: []engine.Need{{Key: rerunKey}}, Responds: true, Terminal: true}
}

func (c rerunCaller) Run(ctx context.Context, x *engine.Exec) engine.Result {
	s := c.seen
	s.mu.Lock()
	defer s.mu.Unlock()
	repl := engine.NewRun(x.Run.Ctx, &engine.Request{ID: x.Run.Req.ID, Route: engine.RouteCompletions, Body: []byte(`{"replacement":1}`)}, nil)
	res, node, ok := x.Rerun(ctx, rerunKey, repl)
	s.okNew, s.node, s.newMark = ok && res.Err == nil, node, rerunKey.Value(repl)
	res, _, ok = x.Rerun(ctx, rerunKey, x.Run)
	s.okSame, s.sameMark = ok && res.Err == nil, rerunKey.Value(x.Run)
	failing := engine.NewRun(x.Run.Ctx, &engine.Request{ID: "f", Route: engine.RouteCompletions, Body: []byte(`{"fail":true}`)}, nil)
	res, _, _ = x.Rerun(ctx, rerunKey, failing)
	s.failErr = res.Err
	_, _, s.missingOK = x.Rerun(ctx, otherKey, repl)
	w, _ := x.Run.Answer()
	w.WriteHeader(200)
	return engine.Result{Responded: true}
}

var rerunSeenNow = &rerunSeen{}

// The stand-ins register at init, as the package's other test node types
// do: registered by the first test that used them, they made the known-type
// list in TestInvalidGolden's unknown_node_type golden depend on test order
// (it failed under -count=3).
func init() {
	engine.Register(engine.NodeType{Name: "t-rerun-provider", Schema: []byte(`{"type":"object"}`),
		Build: func(*engine.BuildContext, json.RawMessage) (engine.Node, error) { return rerunProvider{}, nil }})
	engine.Register(engine.NodeType{Name: "t-rerun-caller", Schema: []byte(`{"type":"object"}`),
		Build: func(*engine.BuildContext, json.RawMessage) (engine.Node, error) {
			return rerunCaller{seen: rerunSeenNow}, nil
		}})
}

const rerunFlow = "nodes:\n  - id: p\n    type: t-rerun-provider\n  - id: c\n    type: t-rerun-caller\n    needs: [p]\n"

// Each re-run is a span "<node> (replay)", a child of the caller's span,
// linked to the node's original span; a failed re-run's span is an error.
func TestExecRerunSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer otel.SetTracerProvider(prev)
	w := load(t, rerunFlow)
	run := engine.NewRun(context.Background(), &engine.Request{ID: "r", Route: engine.RouteChat, Body: []byte(`{"original":1}`)}, httptest.NewRecorder())
	if rep := w.Serve(run); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	p, c, replays := byName["p"], byName["c"], byName["p (replay)"]
	if len(p) != 1 || len(c) != 1 || len(replays) != 3 {
		t.Fatalf("spans: %v", byName)
	}
	failed := 0
	for _, s := range replays {
		if s.Parent().SpanID() != c[0].SpanContext().SpanID() {
			t.Fatalf("replay span's parent %v, want c", s.Parent().SpanID())
		}
		if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != p[0].SpanContext().SpanID() {
			t.Fatalf("replay span's links %v, want p", l)
		}
		if s.Status().Code == codes.Error {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d failed replay spans, want 1", failed)
	}
}

// Exec.Rerun runs the node that provided a key again, as its next attempt,
// on the run it is given (a replacement or the same), reports its error
// with the node's id, and finds nothing to re-run for a key nobody
// provided.
func TestExecRerun(t *testing.T) {
	w := load(t, rerunFlow)
	rec := httptest.NewRecorder()
	run := engine.NewRun(context.Background(), &engine.Request{ID: "r", Route: engine.RouteChat, Body: []byte(`{"original":1}`)}, rec)
	rep := w.Serve(run)
	if rep.Err != nil || !rep.Answered {
		t.Fatalf("report: %+v", rep)
	}
	s := rerunSeenNow
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.okNew || s.node != "p" || s.newMark != (rerunMark{attempt: 2, body: `{"replacement":1}`}) {
		t.Fatalf("replacement run: ok %v node %q mark %+v", s.okNew, s.node, s.newMark)
	}
	if !s.okSame || s.sameMark != (rerunMark{attempt: 2, body: `{"original":1}`}) {
		t.Fatalf("same run: ok %v mark %+v", s.okSame, s.sameMark)
	}
	if e := engine.AsError(s.failErr); s.failErr == nil || e.Node != "p" || e.Kind != engine.KindBadGateway {
		t.Fatalf("failing re-run: %v", s.failErr)
	}
	if s.missingOK {
		t.Fatal("a key nobody provided was re-run")
	}
	// The original run's outcome of p is untouched: one attempt.
	if o := rep.Outcomes[0]; o.Node != "p" || o.Attempt != 1 || o.Status != engine.StatusSucceeded {
		t.Fatalf("p's outcome: %+v", o)
	}
}
