// Package demo is celflow-demo: simulated vLLM workers (one listener per
// role), a media server and celflow's front serving the shipped E/P/D
// workflow, all in one process on 127.0.0.1 free ports. It sends four
// requests (a text chat, the same text again, an image chat and a streaming
// chat) and prints, for each, the path the request took node by node (from
// the engine's Report, through the front's Observe hook), the legs each
// simulated worker received (from its records), and the answer.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/celflow/celflow/cmd/internal/sim"
	"github.com/celflow/celflow/engine"
)

// Options configure a demo run.
type Options struct {
	Stack StackOptions
	// Serve keeps the stack up after the four requests, printing a curl
	// command, until SIGINT or SIGTERM.
	Serve bool
	// Model is the model name sent (the simulators accept any).
	Model string
}

// Budget bounds the four requests together.
const Budget = 45 * time.Second

// A demo case: one request and what its path must show.
type demoCase struct {
	title string
	body  map[string]any
	check func(*engine.Report, *Reply) error
}

// Run runs the demo and returns the process exit code: 0 when every request
// took the expected path, 1 otherwise.
func Run(opts Options, stdout, stderr io.Writer) int {
	if opts.Model == "" {
		opts.Model = "celflow-sim"
	}
	start := time.Now()
	// Before the stack, so that its flush runs after the stack has stopped.
	stopTracing, err := startTracing(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "celflow-demo: tracing: %v\n", err)
		return 1
	}
	defer stopTracing()
	st, err := Start(opts.Stack)
	if err != nil {
		fmt.Fprintf(stderr, "celflow-demo: %v\n", err)
		return 1
	}
	code := 0
	defer func() {
		if c := st.Close(); c != 0 && code == 0 {
			fmt.Fprintf(stderr, "celflow-demo: celflow did not drain cleanly (exit %d)\n", c)
		}
	}()
	printStack(stdout, st, opts.Stack)

	ctx, cancel := context.WithTimeout(context.Background(), Budget)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	cases := demoCases(opts.Model, st.Media.URL+"/sample.png")
	for i, c := range cases {
		if err := runCase(ctx, stdout, st, client, i+1, len(cases), c); err != nil {
			fmt.Fprintf(stdout, "   FAIL: %v\n", err)
			code = 1
		}
	}
	if code != 0 {
		fmt.Fprintln(stdout, "\ndemo failed: a request did not take the expected path")
		return code
	}
	fmt.Fprintf(stdout, "\nall %d requests took the expected path in %s\n", len(cases), time.Since(start).Round(time.Millisecond))
	if !opts.Serve {
		if code = RunAsync(stdout); code != 0 {
			fmt.Fprintln(stdout, "\ndemo failed: the async part")
			return code
		}
	}
	if opts.Serve {
		serveUntilSignal(stdout, st, opts.Model)
	}
	return code
}

// demoCases are the four requests of issue 5.
func demoCases(model, imageURL string) []demoCase {
	text := "Explain in two sentences why a large language model server splits the prefill " +
		"phase from the decode phase, and what travels between the two workers."
	chat := func(content any, extra map[string]any) map[string]any {
		b := map[string]any{"model": model, "max_tokens": 16,
			"messages": []any{map[string]any{"role": "user", "content": content}}}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	return []demoCase{
		{"text chat (prefix miss: the full path)", chat(text, nil), func(r *engine.Report, _ *Reply) error {
			return expect(r, "decode", map[string]string{"try_decode": "failed", "encode": "skipped", "prefill": "succeeded"}, 412)
		}},
		{"the same text again (conditional-decode hit)", chat(text, nil), func(r *engine.Report, _ *Reply) error {
			return expect(r, "try_decode", map[string]string{"prefill": "skipped", "decode": "skipped"}, 0)
		}},
		{"image chat (remote PNG → fetch-media → encode)", chat([]any{
			map[string]any{"type": "text", "text": "What colours does this gradient have?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": imageURL}},
		}, nil), func(r *engine.Report, _ *Reply) error {
			if err := expect(r, "decode", map[string]string{"encode": "succeeded", "prefill": "succeeded"}, 412); err != nil {
				return err
			}
			if o := outcome(r, "encode"); o == nil || len(o.Items) != 1 {
				return fmt.Errorf("encode: want one item leg")
			}
			return nil
		}},
		{"streaming chat", chat("Stream a short greeting from the simulated decode worker, one word at a time please.",
			map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}),
			func(r *engine.Report, rep *Reply) error {
				if rep.Chunks == 0 || !strings.HasPrefix(rep.ContentType, "text/event-stream") {
					return fmt.Errorf("want an SSE reply, got %q with %d chunks", rep.ContentType, rep.Chunks)
				}
				return expect(r, "decode", map[string]string{"prefill": "succeeded"}, 412)
			}},
	}
}

// expect checks who answered, some node statuses, and try_decode's HTTP
// status (0: not checked).
func expect(r *engine.Report, answeredBy string, status map[string]string, tryDecode int) error {
	if r == nil {
		return fmt.Errorf("no report")
	}
	if r.Err != nil && !r.Answered {
		return fmt.Errorf("the run failed: %s", r.Err.Error())
	}
	if o := outcome(r, answeredBy); o == nil || !o.Responded {
		return fmt.Errorf("want the reply from %s", answeredBy)
	}
	for id, want := range status {
		if o := outcome(r, id); o == nil || o.Status.String() != want {
			return fmt.Errorf("%s: want %s", id, want)
		}
	}
	if tryDecode != 0 {
		if o := outcome(r, "try_decode"); o == nil || o.HTTPStatus != tryDecode {
			return fmt.Errorf("try_decode: want HTTP %d", tryDecode)
		}
	}
	return nil
}

func outcome(r *engine.Report, id string) *engine.Outcome {
	if r == nil {
		return nil
	}
	for i := range r.Outcomes {
		if r.Outcomes[i].Node == id {
			return &r.Outcomes[i]
		}
	}
	return nil
}

// runCase sends one request and prints its path, legs and answer.
func runCase(ctx context.Context, out io.Writer, st *Stack, client *http.Client, n, total int, c demoCase) error {
	id := fmt.Sprintf("demo-%d-%d", n, time.Now().UnixNano()%1e6)
	body, err := json.Marshal(c.body)
	if err != nil {
		return err
	}
	since := st.seqs()
	st.Reports.Expect(id)
	fmt.Fprintf(out, "\n[%d/%d] %s\n", n, total, c.title)
	ctx, span := clientSpan(ctx, c.title)
	rep, err := post(ctx, client, st.Celflow.URL+"/v1/chat/completions", id, body)
	span.End()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fin, ok := st.Reports.Wait(wctx, id)
	if !ok {
		return fmt.Errorf("celflow reported nothing for request %s", id)
	}
	fmt.Fprintf(out, "   POST /v1/chat/completions  x-request-id: %s  →  HTTP %d in %s\n", id, rep.Status, ms(fin.Duration))
	if tid := traceID(span); tid != "" {
		fmt.Fprintf(out, "   trace: %s\n", tid)
	}
	printPath(out, fin.Report)
	printLegs(out, fin.Report, st.legsSince(since))
	if rep.Status != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", rep.Status, rep.Error)
	}
	answer := rep.Answer
	if rep.Chunks > 0 {
		answer = fmt.Sprintf("%s   (%d SSE chunks)", answer, rep.Chunks)
	}
	fmt.Fprintf(out, "   answer: %s\n", answer)
	return c.check(fin.Report, rep)
}

// seqs is the last record seq of every worker (and the gateway).
func (st *Stack) seqs() map[*Server]int64 {
	m := map[*Server]int64{}
	for _, s := range st.simulators() {
		m[s] = s.Records.Since(0).Next
	}
	return m
}

func (st *Stack) simulators() []*Server {
	out := append([]*Server(nil), st.Workers...)
	if st.Gateway != nil {
		out = append(out, st.Gateway)
	}
	return out
}

// legsSince returns the worker records newer than since, in arrival order.
func (st *Stack) legsSince(since map[*Server]int64) []sim.Record {
	var recs []sim.Record
	for _, s := range st.simulators() {
		recs = append(recs, s.Records.Since(since[s]).Records...)
	}
	sortRecords(recs)
	return recs
}

func serveUntilSignal(out io.Writer, st *Stack, model string) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"%s/sample.png"}}]}],"max_tokens":16}`,
		model, st.Media.URL)
	fmt.Fprintf(out, "\nThe stack stays up (Ctrl-C to stop). celflow: %s\n", st.Celflow.URL)
	fmt.Fprintf(out, "  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' -d '%s'\n", st.Celflow.URL, body)
	fmt.Fprintf(out, "Worker records: curl -s %s/sim/records\n", st.Worker(sim.RoleDecode).URL)
	<-ctx.Done()
	fmt.Fprintln(out, "stopping")
}
