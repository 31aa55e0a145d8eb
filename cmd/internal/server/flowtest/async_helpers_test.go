package flowtest_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/connectors/async"
	"github.com/celflow/celflow/connectors/async/redistest"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/asyncbroker"
	_ "github.com/celflow/celflow/nodes/decode"
)

// wf places the broker first; decode follows only when nothing was queued.
const wf = `
apiVersion: celflow/v1
kind: Workflow
metadata: {name: async-decode, version: "1"}
routes: [chat, completions]
nodes:
  - id: async
    type: async-broker
    params:
      objectives: {async: {reserved: obj-async, overflow: obj-async-sheddable}, batch: {reserved: obj-batch}}
      routes: [{model: batchy, queue: default, tier: batch}]
      quota: {limits: {team-q: 1}, window_seconds: 60}
  - id: decode
    type: decode
    needs: [{node: async, if: outcome.status == "succeeded"}]
`

// worker is an httptest decode worker. Each leg records its headers; a
// leg blocks while hold is set, until released or its context ends.
type worker struct {
	mu       sync.Mutex
	legs     []http.Header
	status   int
	hold     chan struct{} // nil: answer at once
	started  chan string   // x-request-id of every leg as it starts (buffered)
	aborted  chan string   // x-request-id of every leg whose context ended while held
	inFlight atomic.Int64
}

func (w *worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.inFlight.Add(1)
	defer w.inFlight.Add(-1)
	w.mu.Lock()
	w.legs = append(w.legs, r.Header.Clone())
	hold, status := w.hold, w.status
	w.mu.Unlock()
	id := r.Header.Get("X-Request-Id")
	select {
	case w.started <- id:
	default:
	}
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			w.aborted <- id
			return
		}
	}
	if status == 0 {
		status = 200
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_, _ = io.WriteString(rw, `{"id":"cmpl-`+id+`","choices":[{"message":{"content":"done"}}]}`)
}

func (w *worker) lastLeg() http.Header {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.legs) == 0 {
		return nil
	}
	return w.legs[len(w.legs)-1]
}

// stack is Redis, a worker, celflow's front with the workflow and the
// async routes, and (optionally) a dispatcher.
type stack struct {
	t       testing.TB
	url     string
	w       *worker
	b       *async.Builtin
	rdb     *redis.Client
	up      *upstream.Client
	rt      *asyncbroker.Runtime
	srv     *front.Server
	redis   *redistest.Server
	dispCtx context.CancelFunc
	dispWG  sync.WaitGroup
}

type stackOpts struct {
	settings   asyncbroker.Settings
	builtin    async.BuiltinConfig
	noDispatch bool
	shareWith  *stack // use this stack's redis-server (another replica)
	budget     int
}

func newStack(t testing.TB, o stackOpts) *stack {
	t.Helper()
	rs := o.redisFor(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { rdb.Close() })
	w := &worker{started: make(chan string, 1024), aborted: make(chan string, 1024)}
	ws := &http.Server{Handler: w}
	wl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ws.Serve(wl)
	t.Cleanup(func() { ws.Close() })
	up, err := upstream.New(upstream.Config{Mode: "gateway", Gateway: "http://" + wl.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	b := async.NewBuiltin(rdb, o.builtin)
	t.Cleanup(func() { b.Close() })
	if err := b.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if o.settings.PollInterval == 0 {
		o.settings.PollInterval = 100 * time.Millisecond
	}
	o.settings.Queues, o.settings.Tiers = b.Config().Queues, b.Config().Lanes
	rt := asyncbroker.NewRuntime(b, o.settings, nil, nil)
	wfl, ds := engine.Load("async.yaml", []byte(wf), engine.LoadOptions{Upstream: up,
		Services: engine.Services{asyncbroker.ServiceName: rt}})
	if wfl == nil {
		t.Fatalf("workflow: %s", ds)
	}
	binding := asyncbroker.BindingOf(wfl)
	bind := func(*http.Request) *asyncbroker.Binding { return binding }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := front.New(front.Options{Listener: ln,
		Runners: map[engine.Route]engine.Runner{engine.RouteChat: wfl, engine.RouteCompletions: wfl},
		Routes: []front.Route{
			{Path: asyncbroker.PathRequests, Methods: []string{"GET"}, Handler: rt.GetHandler(front.PathVar, bind)},
			{Path: asyncbroker.PathRequests, Methods: []string{"DELETE"}, Handler: rt.DeleteHandler(front.PathVar, bind)},
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	s := &stack{t: t, url: "http://" + ln.Addr().String(), w: w, b: b, rdb: rdb, up: up, rt: rt, srv: srv, redis: rs}
	if !o.noDispatch {
		s.startDispatcher(o.budget)
	}
	return s
}

func (o stackOpts) redisFor(t testing.TB) *redistest.Server {
	if o.shareWith != nil {
		return o.shareWith.redis
	}
	return redistest.Start(t)
}

type upView struct{ up *upstream.Client }

func (v upView) InFlight(role string) int64 { return v.up.InFlight(upstream.Role(role)) }

func (s *stack) startDispatcher(budget int) {
	ctx, cancel := context.WithCancel(context.Background())
	s.dispCtx = cancel
	d := asyncbroker.NewDispatcher(s.rt, s.b, asyncbroker.DispatcherOptions{Handler: s.srv.Handler(),
		View: upView{s.up}, Roles: []string{"decode"}, Budget: budget, Concurrency: 4})
	s.dispWG.Add(1)
	go func() { defer s.dispWG.Done(); d.Run(ctx, time.Second) }()
	s.t.Cleanup(s.stopDispatcher)
}

func (s *stack) stopDispatcher() {
	if s.dispCtx != nil {
		s.dispCtx()
		s.dispWG.Wait()
		s.dispCtx = nil
	}
}

type reply struct {
	status int
	header http.Header
	body   string
}

// do sends one request; headers are name, value pairs.
func (s *stack) do(method, path, body string, headers ...string) reply {
	s.t.Helper()
	return s.doCtx(context.Background(), method, path, body, headers...)
}

func (s *stack) doCtx(ctx context.Context, method, path, body string, headers ...string) reply {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{status: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// eventually polls cond (bounded), failing with msg.
func eventually(t *testing.T, msg string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal(msg)
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func (w *worker) setHold(ch chan struct{}) {
	w.mu.Lock()
	w.hold = ch
	w.mu.Unlock()
}
