//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Issue 19, decode failover with real processes: 200 concurrent chat
// streams through P/D and through decode-only while decode worker
// processes are SIGKILLed mid-stream (one, a little later a second, and
// the first restarted on its port; the third carries on). Every stream
// completes, and with greedy sampling (the simulators' deterministic mode)
// each client's assembled text equals an unbroken run of the same request;
// one id, one finish_reason and a usage chunk per stream. Checked with
// openai-go and with the npm openai client (skipped, as TestNodeOpenAIClient
// is, when its node_modules are absent). The kill points are drawn from a
// seeded generator; the outcome does not depend on them.

const (
	failoverStreams   = 200
	failoverPrompts   = 20
	failoverMaxTokens = 40
)

// foStack is one failover stack: one prefill (P/D), three decode worker
// processes and celflow serve.
type foStack struct {
	url     string
	decodes []*simProc
	dir     string
	args    []string // decode workers' common flags
}

func startFailoverStack(t *testing.T, pd bool) *foStack {
	t.Helper()
	fs := &foStack{dir: t.TempDir(), args: []string{"--roles", "decode", "--deterministic", "--ttft", "20ms", "--itl", "8ms", "--output-tokens", "64"}}
	var pools strings.Builder
	if pd {
		p := startSim(t, "prefill", "--listen", "127.0.0.1:0", "--roles", "prefill", "--name", "p0", "--deterministic", "--ttft", "20ms")
		fmt.Fprintf(&pools, "    prefill: [%s]\n", p.url)
	}
	var urls []string
	for i := range 3 {
		d := startSim(t, fmt.Sprintf("decode-%d", i), append([]string{"--listen", "127.0.0.1:0", "--name", fmt.Sprintf("d%d", i)}, fs.args...)...)
		fs.decodes = append(fs.decodes, d)
		urls = append(urls, d.url)
	}
	fmt.Fprintf(&pools, "    decode: [%s]\n", strings.Join(urls, ", "))
	wf := `apiVersion: celflow/v1
kind: Workflow
metadata: {name: failover-e2e, version: "1"}
routes: [chat, completions]
defaults: {kv_connector: kv-nixl}
nodes:
`
	needs := ""
	if pd {
		wf += "  - id: prefill\n    type: prefill\n    retry: {attempts: 3, backoff: 10ms}\n"
		needs = "    needs: [prefill]\n"
	}
	// retry: a decode leg sent to a worker that is already dead fails
	// before its first byte and is sent to another (engine retry); failover:
	// a leg that breaks mid-stream is continued.
	wf += "  - id: decode\n    type: decode\n" + needs + "    retry: {attempts: 3, backoff: 10ms}\n" +
		"    params:\n      stream_idle_timeout: 5s\n      failover: {attempts: 3}\n"
	writeFile(t, filepath.Join(fs.dir, "workflow.yaml"), []byte(wf))
	cfg := "server: {listen: \"127.0.0.1:0\", drain_delay: 0s, shutdown_timeout: 5s}\n" +
		"upstream:\n  mode: direct\n  pools:\n" + pools.String() +
		"telemetry: {log_level: info, log_format: json}\nworkflow: ./workflow.yaml\n"
	writeFile(t, filepath.Join(fs.dir, "celflow.yaml"), []byte(cfg))
	p := startProc(t, "celflow serve", "serve", "--config", filepath.Join(fs.dir, "celflow.yaml"))
	addr, err := p.waitLine(servingRe, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fs.url = "http://" + addr
	return fs
}

// kill SIGKILLs decode worker i (the process, as the kernel kills an OOM
// victim) and waits for it to be gone.
func (fs *foStack) kill(t *testing.T, i int) {
	t.Helper()
	d := fs.decodes[i]
	d.p.signal(syscall.SIGKILL)
	if _, ok := d.p.wait(5 * time.Second); !ok {
		t.Fatalf("decode-%d did not die", i)
	}
}

// restart starts decode worker i again on its port (a pod back after a
// restart).
func (fs *foStack) restart(t *testing.T, i int) {
	t.Helper()
	d := fs.decodes[i]
	fs.decodes[i] = startSim(t, d.name+"-restarted", append([]string{"--listen", "127.0.0.1:" + d.port, "--name", d.name}, fs.args...)...)
}

// chaos plays the kills, each when the worker is mid-stream on a number
// of streams drawn from a seeded generator (its own vllm:num_requests_running,
// read from the worker: the clients' view lags, a Node client's by much):
// decode-0 dies, then decode-1 dies and decode-0 comes back on its port.
// decode-2 carries on. It returns when done or when the streams are.
func (fs *foStack) chaos(t *testing.T, seed uint64, finished <-chan struct{}) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for k, i := range []int{0, 1} {
		want := 3 + rng.IntN(25)
		deadline := time.Now().Add(60 * time.Second)
		for running(fs.decodes[i].url) < want {
			select {
			case <-finished:
				if k == 0 {
					t.Fatalf("the streams ended before decode-%d ran %d at once", i, want)
				}
				return
			case <-time.After(time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("decode-%d never ran %d streams at once", i, want)
			}
		}
		t.Logf("SIGKILL decode-%d while it runs %d streams or more", i, want)
		fs.kill(t, i)
		if k == 1 {
			fs.restart(t, 0)
		}
	}
}

var runningRe = regexp.MustCompile(`(?m)^vllm:num_requests_running(?:\{[^}]*\})? ([0-9.e+]+)$`)

// running is a worker's vllm:num_requests_running, -1 when unreadable.
func running(url string) int {
	resp, err := httpc.Get(url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := runningRe.FindSubmatch(b)
	if m == nil {
		return -1
	}
	f, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return -1
	}
	return int(f)
}

func foPrompt(i int) string {
	return fmt.Sprintf("failover %d: tell the long story of the worker that died in the middle of a sentence", i%failoverPrompts)
}

// foResult is one stream as a client assembled it.
type foResult struct {
	I                int    `json:"i"`
	Text             string `json:"text"`
	Finish           string `json:"finish"`
	CompletionTokens int64  `json:"completion_tokens"`
	IDs              int    `json:"ids"`
	Finishes         int    `json:"finishes"`
	Error            string `json:"error"`
}

func foClient(url string) openai.Client {
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: failoverStreams}}
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("e2e-key"), option.WithMaxRetries(0),
		option.WithRequestTimeout(60*time.Second), option.WithHTTPClient(hc))
}

// foStream reads one chat stream with openai-go.
func foStream(c *openai.Client, i int) foResult {
	r := foResult{I: i}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: model, MaxTokens: openai.Int(failoverMaxTokens), Temperature: openai.Float(0),
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(foPrompt(i))},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithHeader("X-Request-Id", fmt.Sprintf("go-failover-%d", i)))
	defer s.Close()
	ids := map[string]bool{}
	for s.Next() {
		ch := s.Current()
		ids[ch.ID] = true
		if len(ch.Choices) > 0 {
			r.Text += ch.Choices[0].Delta.Content
			if f := ch.Choices[0].FinishReason; f != "" {
				r.Finish = f
				r.Finishes++
			}
		}
		if ch.Usage.CompletionTokens > 0 {
			r.CompletionTokens = ch.Usage.CompletionTokens
		}
	}
	if err := s.Err(); err != nil {
		r.Error = err.Error()
	}
	r.IDs = len(ids)
	return r
}

// baseline is the unbroken answer to each prompt, before any kill.
func baseline(t *testing.T, url string) []foResult {
	t.Helper()
	c := foClient(url)
	want := make([]foResult, failoverPrompts)
	for i := range want {
		want[i] = foStream(&c, i)
		if w := want[i]; w.Error != "" || w.Text == "" || w.Finishes != 1 || w.CompletionTokens == 0 {
			t.Fatalf("unbroken run %d: %+v", i, w)
		}
	}
	return want
}

func checkFailoverResults(t *testing.T, got, want []foResult) {
	t.Helper()
	bad := 0
	for _, r := range got {
		w := want[r.I%failoverPrompts]
		if r.Error != "" || r.Text != w.Text || r.Finish != w.Finish || r.Finishes != 1 || r.IDs != 1 || r.CompletionTokens != w.CompletionTokens {
			if bad++; bad <= 5 {
				t.Errorf("stream %d: %+v\nwant text %q finish %s usage %d", r.I, r, w.Text, w.Finish, w.CompletionTokens)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d streams differ from an unbroken run", bad, len(got))
	}
}

func TestFailoverSIGKILL(t *testing.T) {
	for k, topo := range []struct {
		name string
		pd   bool
	}{{"pd", true}, {"decode-only", false}} {
		t.Run(topo.name, func(t *testing.T) {
			t.Run("openai-go", func(t *testing.T) {
				fs := startFailoverStack(t, topo.pd)
				want := baseline(t, fs.url)
				c := foClient(fs.url)
				got := make([]foResult, failoverStreams)
				finished := make(chan struct{})
				var wg sync.WaitGroup
				for i := range failoverStreams {
					wg.Add(1)
					go func() {
						defer wg.Done()
						got[i] = foStream(&c, i)
					}()
				}
				go func() { wg.Wait(); close(finished) }()
				fs.chaos(t, uint64(19+k), finished)
				select {
				case <-finished:
				case <-time.After(120 * time.Second):
					t.Fatal("the streams did not finish within 120 s")
				}
				checkFailoverResults(t, got, want)
				t.Logf("%d streams, every one equal to an unbroken run; %s", failoverStreams, fs.failovers(t))
			})
			t.Run("npm openai", func(t *testing.T) {
				dir := filepath.Join("..", "..", "..", "testdata", "e2e", "node")
				if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
					t.Skip("testdata/e2e/node/node_modules/openai is not installed: run `npm ci --prefix testdata/e2e/node`")
				}
				node, err := exec.LookPath("node")
				if err != nil {
					t.Skip("node is not on PATH")
				}
				fs := startFailoverStack(t, topo.pd)
				want := baseline(t, fs.url)
				prompts := make([]string, failoverPrompts)
				for i := range prompts {
					prompts[i] = foPrompt(i)
				}
				pj, _ := json.Marshal(prompts)
				cmd := exec.Command(node, "failover.mjs")
				cmd.Dir = dir
				cmd.Env = append(childEnv(), "CELFLOW_URL="+fs.url, "PROMPTS="+string(pj),
					fmt.Sprintf("CONCURRENCY=%d", failoverStreams), fmt.Sprintf("MAX_TOKENS=%d", failoverMaxTokens))
				p := startCmd(t, "node failover.mjs", cmd)
				fs.chaos(t, uint64(190+k), p.done)
				code, ok := p.wait(120 * time.Second)
				if !ok {
					t.Fatal("node failover.mjs did not finish within 120 s")
				}
				var got []foResult
				for _, ln := range strings.Split(p.output(), "\n") {
					if s, ok := strings.CutPrefix(ln, "out: result "); ok {
						var r foResult
						if err := json.Unmarshal([]byte(s), &r); err != nil {
							t.Fatalf("%q: %v", ln, err)
						}
						got = append(got, r)
					}
				}
				if len(got) != failoverStreams {
					t.Fatalf("node reported %d streams (exit %d):\n%s", len(got), code, p.tail(20))
				}
				checkFailoverResults(t, got, want)
				if code != 0 {
					t.Fatalf("node exit %d:\n%s", code, p.tail(5))
				}
				t.Logf("node: %d streams, every one equal to an unbroken run; %s", failoverStreams, fs.failovers(t))
			})
		})
	}
}

// failovers is the stack's celflow_failovers_total lines, for the log.
func (fs *foStack) failovers(t *testing.T) string {
	t.Helper()
	resp, err := httpc.Get(fs.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "celflow_failovers_total") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatal("no failover was counted: the kills hit no stream")
	}
	return strings.Join(out, "; ")
}
