package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/connectors/async"
	"github.com/celflow/celflow/connectors/async/redisproc"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/asyncbroker"
)

// asyncPart is the stack's async machinery (StackOptions.RedisURL).
type asyncPart struct {
	rdb  *redis.Client
	b    *async.Builtin
	rt   *asyncbroker.Runtime
	stop context.CancelFunc
	done chan struct{}
}

// newAsyncPart builds the builtin back end and its runtime, which the
// workflow's build gets as a service.
func newAsyncPart(url string) (*asyncPart, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	b := async.NewBuiltin(rdb, async.BuiltinConfig{Lease: 5 * time.Second})
	if err := b.Ensure(context.Background()); err != nil {
		rdb.Close()
		return nil, err
	}
	rt := asyncbroker.NewRuntime(b, asyncbroker.Settings{Queues: b.Config().Queues, Tiers: b.Config().Lanes,
		PollInterval: 100 * time.Millisecond}, nil, nil)
	return &asyncPart{rdb: rdb, b: b, rt: rt}, nil
}

// services lend the runtime to the workflow's build (nil: no async).
func (a *asyncPart) services() engine.Services {
	if a == nil {
		return nil
	}
	return engine.Services{asyncbroker.ServiceName: a.rt}
}

// routes serve GET and DELETE scoped by b, the workflow's binding (the
// demo never reloads).
func (a *asyncPart) routes(b *asyncbroker.Binding) []front.Route {
	if a == nil {
		return nil
	}
	bind := func(*http.Request) *asyncbroker.Binding { return b }
	return []front.Route{
		{Path: asyncbroker.PathRequests, Methods: []string{"GET"}, Handler: a.rt.GetHandler(front.PathVar, bind)},
		{Path: asyncbroker.PathRequests, Methods: []string{"DELETE"}, Handler: a.rt.DeleteHandler(front.PathVar, bind)},
	}
}

type upView struct{ c *upstream.Client }

func (v upView) InFlight(role string) int64 { return v.c.InFlight(upstream.Role(role)) }

// start runs the dispatcher over the front's handler.
func (a *asyncPart) start(h http.Handler, c *upstream.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	a.stop, a.done = cancel, make(chan struct{})
	d := asyncbroker.NewDispatcher(a.rt, a.b, asyncbroker.DispatcherOptions{Handler: h, View: upView{c}})
	go func() { defer close(a.done); d.Run(ctx, 2*time.Second) }()
}

func (a *asyncPart) close() {
	if a == nil {
		return
	}
	if a.stop != nil {
		a.stop()
		<-a.done
	}
	a.b.Close()
	a.rdb.Close()
}

// RunAsync is the demo's async part: with redis-server on PATH, a stack
// serving epd-async.yaml on a fresh Redis shows an enqueue, a fetch and a
// cancel; without it, one line says how to get it.
func RunAsync(stdout io.Writer) int {
	dir, err := os.MkdirTemp("", "celflow-demo-redis")
	if err != nil {
		fmt.Fprintf(stdout, "async demo: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := redisproc.Launch(dir, redisproc.Options{})
	if err == redisproc.ErrNotInstalled {
		fmt.Fprintln(stdout, "\nasync demo skipped: redis-server is not on PATH (apt-get install -y redis-server)")
		return 0
	}
	if err != nil {
		fmt.Fprintf(stdout, "async demo: %v\n", err)
		return 1
	}
	defer srv.Stop()
	st, err := Start(StackOptions{Workflow: "epd-async.yaml", RedisURL: srv.URL(), TTFT: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintf(stdout, "async demo: %v\n", err)
		return 1
	}
	defer st.Close()
	fmt.Fprintf(stdout, "\nasync requests (epd-async.yaml, redis-server at %s)\n", srv.Addr)
	c := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	body := `{"model":"celflow-sim","max_tokens":8,"messages":[{"role":"user","content":"Summarise the async demo."}]}`
	steps := []struct {
		title, method, path, body string
		headers                   []string
		want                      int
	}{
		{"enqueue", "POST", "/v1/chat/completions", body, []string{"x-llm-d-async-mode", "enqueue", "x-request-id", "demo-async-1"}, 202},
		{"fetch (long-poll)", "GET", "/v1/requests/demo-async-1?wait=10", "", nil, 200},
		{"enqueue another", "POST", "/v1/chat/completions", body, []string{"x-llm-d-async-mode", "enqueue", "x-request-id", "demo-async-2"}, 202},
		{"cancel it", "DELETE", "/v1/requests/demo-async-2", "", nil, 204},
		{"fetch the cancelled one", "GET", "/v1/requests/demo-async-2", "", nil, 410},
	}
	code := 0
	for i, s := range steps {
		req, _ := http.NewRequest(s.method, st.Celflow.URL+s.path, strings.NewReader(s.body))
		for k := 0; k+1 < len(s.headers); k += 2 {
			req.Header.Set(s.headers[k], s.headers[k+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			fmt.Fprintf(stdout, "%d. %s: %v\n", i+1, s.title, err)
			return 1
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mark := "ok"
		if resp.StatusCode != s.want {
			mark, code = fmt.Sprintf("FAIL (want %d)", s.want), 1
		}
		fmt.Fprintf(stdout, "%d. %-24s %s %s → %d %s\n   %.160s\n", i+1, s.title, s.method, s.path, resp.StatusCode, mark, strings.TrimSpace(string(b)))
	}
	return code
}
