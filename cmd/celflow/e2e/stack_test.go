//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/celflow/celflow/cmd/internal/demo"
)

// roles are the simulated worker roles, one process each, so every leg's
// records show which role received it.
var roles = []string{"render", "encode", "prefill", "decode"}

type stackOpts struct {
	gateway  bool                      // legs through `celflow-sim gateway`
	workflow string                    // shipped workflow file; default epd.yaml
	params   map[string]map[string]any // node params to override, by node id
	server   map[string]string         // server: keys of the serve config
	simArgs  []string                  // extra flags of every worker
	extra    string                    // more top-level sections of the serve config (YAML)
}

// simProc is one simulator process.
type simProc struct {
	name string
	url  string // http://127.0.0.1:PORT
	port string
	p    *proc
}

type stack struct {
	t        *testing.T
	workers  map[string]*simProc
	gateway  *simProc
	media    *httptest.Server
	url      string // celflow's base URL
	celflow  *proc
	dir      string // config and workflow files
	workflow string
}

var (
	listeningRe = regexp.MustCompile(`^out: listening on (http://127\.0\.0\.1:\d+)$`)
	servingRe   = regexp.MustCompile(`"listen":"(127\.0\.0\.1:\d+)".*"msg":"celflow is serving"`)
)

// startStack starts the simulators, the media server and celflow, and
// waits until celflow's /readyz is 200 (ACCEPTANCE 56).
func startStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	if o.workflow == "" {
		o.workflow = "epd.yaml"
	}
	st := &stack{t: t, workers: map[string]*simProc{}, dir: t.TempDir(), workflow: o.workflow}
	for _, r := range roles {
		args := append([]string{"--listen", "127.0.0.1:0", "--roles", r, "--name", r,
			"--shared-dir", filepath.Join(st.dir, "kv")}, o.simArgs...)
		st.workers[r] = startSim(t, r, args...)
	}
	st.media = httptest.NewServer(demo.NewMediaServer())
	t.Cleanup(st.media.Close)

	// The prefill endpoint names its bootstrap port (the simulator serves
	// SGLang's rendezvous on its own port); other workflows ignore it.
	up := fmt.Sprintf("  mode: direct\n  pools:\n    encode: [%s]\n    prefill: [{url: %s, bootstrap_port: %s}]\n    decode: [%s]\n",
		st.workers["encode"].url, st.workers["prefill"].url, st.workers["prefill"].port, st.workers["decode"].url)
	if o.gateway {
		st.gateway = startSim(t, "gateway", "gateway", "--listen", "127.0.0.1:0",
			"--encode", st.workers["encode"].url, "--prefill", st.workers["prefill"].url, "--decode", st.workers["decode"].url)
		up = fmt.Sprintf("  mode: gateway\n  gateway: %s\n", st.gateway.url)
	}
	wf, err := demo.Workflow(o.workflow, demo.Overrides{RenderAddress: st.workers["render"].url, AllowLoopback: true, Params: o.params})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(st.dir, "workflow.yaml"), wf)
	server := map[string]string{"listen": "127.0.0.1:0", "drain_delay": "0s", "shutdown_timeout": "5s"}
	for k, v := range o.server {
		server[k] = v
	}
	var cfg strings.Builder
	cfg.WriteString("server:\n")
	for k, v := range server {
		if _, err := strconv.Atoi(v); err == nil {
			fmt.Fprintf(&cfg, "  %s: %s\n", k, v) // an integer key (max_request_body_size)
		} else {
			fmt.Fprintf(&cfg, "  %s: %q\n", k, v)
		}
	}
	fmt.Fprintf(&cfg, "upstream:\n%stelemetry:\n  log_level: info\n  log_format: json\nworkflow: ./workflow.yaml\n", up)
	cfg.WriteString(o.extra)
	cfgPath := filepath.Join(st.dir, "celflow.yaml")
	writeFile(t, cfgPath, []byte(cfg.String()))

	st.celflow = startProc(t, "celflow serve", "serve", "--config", cfgPath)
	addr, err := st.celflow.waitLine(servingRe, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st.url = "http://" + addr
	st.waitReady(10 * time.Second)
	return st
}

// startSim starts one celflow-sim (args) and waits for its address.
func startSim(t *testing.T, name string, args ...string) *simProc {
	t.Helper()
	p := startSimProc(t, name, args...)
	u, err := p.waitLine(listeningRe, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return &simProc{name: name, url: u, port: pu.Port(), p: p}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// httpc talks to the stack; it never uses a proxy.
var httpc = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 32}, Timeout: 30 * time.Second}

// waitReady polls /readyz until 200, bounded.
func (st *stack) waitReady(within time.Duration) {
	st.t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := httpc.Get(st.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("/readyz not 200 within %s (last: %v)", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// client is an openai-go client for the stack: no retries, so every status
// celflow sends is what the test sees.
func (st *stack) client(opts ...option.RequestOption) *openai.Client {
	base := []option.RequestOption{
		option.WithBaseURL(st.url + "/v1/"), option.WithAPIKey("e2e-key"), option.WithMaxRetries(0),
		option.WithRequestTimeout(30 * time.Second), option.WithHTTPClient(httpc),
	}
	c := openai.NewClient(append(base, opts...)...)
	return &c
}

// simulators are the workers, then the gateway when there is one.
func (st *stack) simulators() []*simProc {
	var out []*simProc
	for _, r := range roles {
		out = append(out, st.workers[r])
	}
	if st.gateway != nil {
		out = append(out, st.gateway)
	}
	return out
}
