package flowtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	_ "github.com/celflow/celflow/nodes/all"
)

// result is what one case produced.
type result struct {
	legs   []*leg
	resp   *http.Response
	body   []byte
	report *engine.Report
	obs    *front.Observation
	logs   string
	warn   string // load warnings
}

// syncBuf is a goroutine-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newClient sends exactly the case's headers: no proxy, no automatic
// Accept-Encoding (and no Connection: close, which a client without
// keep-alives would add); each case has its own client.
func newClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
}

// runCase loads the workflow against fresh fakes, serves one request
// through the real front and returns everything observed.
func runCase(c *flowCase, root string) (*result, *fakes, error) {
	f := startFakes(c)
	res, err := runWith(c, root, f)
	return res, f, err
}

func runWith(c *flowCase, root string, f *fakes) (*result, error) {
	name, wfData, err := c.workflowBytes(root, f.render)
	if err != nil {
		return nil, err
	}
	up, err := upstream.New(f.upstreamConfig())
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	wf, ds := engine.Load(name, wfData, engine.LoadOptions{Upstream: up, WriteTimeout: 5 * time.Second})
	if wf == nil {
		return nil, fmt.Errorf("workflow does not load:\n%s", ds.String())
	}
	res := &result{warn: ds.String()}

	logs := &syncBuf{}
	log := logrus.New()
	log.SetOutput(logs)
	log.SetLevel(logrus.DebugLevel)
	log.SetFormatter(&logrus.JSONFormatter{})
	// Nodes log through the standard logger; cases run one at a time.
	std := logrus.StandardLogger()
	std.SetOutput(logs)
	std.SetLevel(logrus.DebugLevel)
	defer std.SetOutput(io.Discard)

	observed := make(chan *front.Observation, 4)
	runners := map[engine.Route]engine.Runner{}
	for _, rt := range engine.Routes {
		if wf.Serves(rt) {
			runners[rt] = wf
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := front.New(front.Options{Listener: ln, Runners: runners, Log: log,
		Observe: func(o *front.Observation) {
			cp := *o
			observed <- &cp
		},
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		ShutdownTimeout: 2 * time.Second})
	ctx, stop := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() { exited <- srv.Run(ctx) }()
	defer func() {
		stop()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
	}()

	req, err := c.httpRequest("http://"+ln.Addr().String(), f.media)
	if err != nil {
		return nil, err
	}
	cl := newClient()
	defer cl.CloseIdleConnections()
	resp, err := cl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	res.body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		// An abnormal end is a result too (PROTOCOL 13); record it.
		res.body = append(res.body, []byte("\n<read error: "+errText(err)+">")...)
	}
	res.resp = resp
	select {
	case res.obs = <-observed:
		res.report = res.obs.Report
	case <-time.After(5 * time.Second):
		return nil, fmt.Errorf("the front never reported the request")
	}
	res.legs = f.settle(c.MinLegs, 5*time.Second)
	res.logs = logs.String()
	return res, nil
}

func errText(err error) string {
	s := err.Error()
	if strings.Contains(s, "unexpected EOF") {
		return "unexpected EOF"
	}
	return s
}

func (f *fakes) upstreamConfig() upstream.Config {
	u := f.c.Upstream
	cfg := upstream.Config{Picker: u.Picker, ShortPromptTokens: u.ShortPromptTokens}
	if f.pools == nil {
		cfg.Mode, cfg.Gateway = "gateway", f.gateway
		return cfg
	}
	cfg.Mode = "direct"
	cfg.Pools = map[upstream.Role][]upstream.Endpoint{}
	for role, eps := range f.pools {
		for _, ep := range eps {
			cfg.Pools[upstream.Role(role)] = append(cfg.Pools[upstream.Role(role)],
				upstream.Endpoint{URL: ep.url, BootstrapPort: ep.bootstrapPort})
		}
	}
	return cfg
}

// httpRequest builds the client request: headers in the case's order,
// {{media}} in the body replaced by the media fake's URL.
func (c *flowCase) httpRequest(base, media string) (*http.Request, error) {
	path := c.Request.Path
	if path == "" {
		rt, ok := engine.ParseRoute(c.Request.Route)
		if !ok {
			return nil, fmt.Errorf("request.route %q: want chat, completions or generate", c.Request.Route)
		}
		path = rt.Path()
	}
	method := c.Request.Method
	if method == "" {
		method = http.MethodPost
	}
	body := strings.ReplaceAll(c.Request.Body, "{{media}}", media)
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, kv := range c.Request.Headers {
		req.Header.Add(kv[0], kv[1])
	}
	return req, nil
}
