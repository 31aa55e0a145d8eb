package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/config"
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/sim"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/asyncbroker"
)

// StackOptions configure an in-process stack.
type StackOptions struct {
	// Gateway routes worker legs through the simulated Inference Gateway
	// (sim gateway) instead of direct pools.
	Gateway bool
	// Workflow is the shipped workflow to serve; default "epd.yaml".
	Workflow string
	// Listen is celflow's address; default 127.0.0.1:0 (a free port).
	Listen string
	// TTFT and ITL are every simulated worker's latencies.
	TTFT, ITL time.Duration
	// RedisURL, when set, adds the async machinery (builtin back end, GET and
	// DELETE /v1/requests/{id}, a dispatcher); the workflow should start with
	// an async-broker (epd-async.yaml).
	RedisURL string
	// Log receives celflow's logs (nodes log through logrus's standard
	// logger, which the caller configures); nil discards the front's.
	Log *logrus.Logger
}

// Server is one listener of the stack.
type Server struct {
	Name string
	URL  string // http://127.0.0.1:PORT
	// Records is the simulator's request log (nil for the media server and
	// celflow).
	Records *sim.Recorder
}

// Stack is the demo's world on 127.0.0.1: one simulated worker per role
// (each its own listener, so every leg is visible), an optional gateway, a
// media server and celflow's front serving a shipped workflow.
type Stack struct {
	Workers []*Server // render, encode, prefill, decode
	Gateway *Server   // nil in direct mode
	Media   *Server
	Celflow *Server
	Reports *Reports // every finished request's engine.Report, by request id

	httpServers []*http.Server
	async       *asyncPart
	cancel      context.CancelFunc
	frontDone   chan int
}

// Start builds and starts a stack; Close stops it. On error whatever was
// started is stopped.
func Start(opts StackOptions) (st *Stack, err error) {
	if opts.Workflow == "" {
		opts.Workflow = "epd.yaml"
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	st = &Stack{Reports: newReports(), frontDone: make(chan int, 1)}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	for _, role := range sim.AllRoles {
		w, err := sim.NewWorker(sim.Config{Name: string(role), Roles: []sim.Role{role}, TTFT: opts.TTFT, ITL: opts.ITL})
		if err != nil {
			return nil, err
		}
		s, err := st.serve(string(role), w)
		if err != nil {
			return nil, err
		}
		s.Records = w.Records()
		st.Workers = append(st.Workers, s)
	}
	if st.Media, err = st.serve("media", NewMediaServer()); err != nil {
		return nil, err
	}
	up := config.Defaults().Upstream
	if opts.Gateway {
		g, err := sim.NewGateway(sim.GatewayConfig{
			Encode: []string{st.Worker(sim.RoleEncode).URL}, Prefill: []string{st.Worker(sim.RolePrefill).URL},
			Decode: []string{st.Worker(sim.RoleDecode).URL},
		})
		if err != nil {
			return nil, err
		}
		if st.Gateway, err = st.serve("gateway", g); err != nil {
			return nil, err
		}
		st.Gateway.Records = g.Records()
		up.Mode, up.Gateway = "gateway", st.Gateway.URL
	} else {
		up.Mode = "direct"
		up.Pools = map[upstream.Role][]upstream.Endpoint{
			upstream.RoleEncode:  {{URL: st.Worker(sim.RoleEncode).URL}},
			upstream.RolePrefill: {{URL: st.Worker(sim.RolePrefill).URL}},
			upstream.RoleDecode:  {{URL: st.Worker(sim.RoleDecode).URL}},
		}
	}
	client, err := upstream.New(up)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	if opts.RedisURL != "" {
		if st.async, err = newAsyncPart(opts.RedisURL); err != nil {
			return nil, fmt.Errorf("async: %w", err)
		}
	}
	src, err := Workflow(opts.Workflow, Overrides{RenderAddress: st.Worker(sim.RoleRender).URL, AllowLoopback: true})
	if err != nil {
		return nil, err
	}
	srvDefaults := config.Defaults().Server
	wf, ds := engine.Load(opts.Workflow, src, engine.LoadOptions{Upstream: client, Services: st.async.services(), WriteTimeout: srvDefaults.WriteTimeout})
	if wf == nil {
		return nil, fmt.Errorf("workflow %s does not load:\n%s", opts.Workflow, ds.String())
	}
	runners := map[engine.Route]engine.Runner{}
	for _, rt := range engine.Routes {
		if wf.Serves(rt) {
			runners[rt] = wf
		}
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = logrus.New()
		log.SetOutput(io.Discard)
	}
	fr := front.New(front.Options{
		Listener: ln, Runners: runners, Observe: st.Reports.observe, Log: log,
		ReadHeaderTimeout: srvDefaults.ReadHeaderTimeout, ReadTimeout: srvDefaults.ReadTimeout,
		WriteTimeout: srvDefaults.WriteTimeout,
		// In-process and on loopback: no load balancer to drain from.
		DrainDelay: 0, ShutdownTimeout: 5 * time.Second,
		Routes: st.async.routes(asyncbroker.BindingOf(wf)),
	})
	if st.async != nil {
		st.async.start(fr.Handler(), client)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	go func() { st.frontDone <- fr.Run(ctx) }()
	st.Celflow = &Server{Name: "celflow", URL: "http://" + ln.Addr().String()}
	return st, st.waitReady(10 * time.Second)
}

// Worker returns the simulated worker of role.
func (st *Stack) Worker(role sim.Role) *Server {
	for _, s := range st.Workers {
		if s.Name == string(role) {
			return s
		}
	}
	return nil
}

// serve starts h on a free loopback port.
func (st *Stack) serve(name string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: sim.DefaultKeepAlive}
	st.httpServers = append(st.httpServers, srv)
	go func() { _ = srv.Serve(ln) }()
	return &Server{Name: name, URL: "http://" + ln.Addr().String()}, nil
}

// waitReady polls celflow's /readyz until it answers 200.
func (st *Stack) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer c.CloseIdleConnections()
	for {
		resp, err := c.Get(st.Celflow.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case code := <-st.frontDone:
			st.frontDone <- code
			return fmt.Errorf("celflow stopped before it was ready (exit %d)", code)
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("celflow did not become ready within " + within.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops celflow (draining in-flight requests) and every server, and
// returns celflow's exit code (0: everything drained).
func (st *Stack) Close() int {
	code := 0
	st.async.close()
	if st.cancel != nil {
		st.cancel()
		select {
		case code = <-st.frontDone:
		case <-time.After(10 * time.Second):
			code = 1
		}
	}
	for _, s := range st.httpServers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if s.Shutdown(ctx) != nil {
			_ = s.Close()
		}
		cancel()
	}
	return code
}
