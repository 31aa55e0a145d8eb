package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Decode failover (issue 19) through the real serve, with real `celflow
// sim` workers in direct pools, in their deterministic mode: a decode leg
// cut after k tokens (the sim's cut-after fault, which counts from the
// prompt's base so the continuation is not cut again) is continued on the
// other decode worker, and what the client assembles is byte for byte what
// an unbroken run of the same request gives. Chat and completions, streamed
// and not, P/D (a fresh prefill for the continuation) and decode-only.

const failoverPD = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: pd-failover, version: "1"}
routes: [chat, completions, generate]
defaults: {kv_connector: kv-nixl}
nodes:
  - id: prefill
    type: prefill
  - id: decode
    type: decode
    needs: [prefill]
    params:
      failover: {attempts: 2}
`

const failoverDecodeOnly = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: decode-failover, version: "1"}
routes: [chat, completions, generate]
nodes:
  - id: decode
    type: decode
    params:
      stream_idle_timeout: 5s
      failover: {attempts: 2}
`

// failoverStack starts one prefill and two decode sims and a serve of wf.
func failoverStack(t *testing.T, wf string) (addr string, logs *syncBuf, decodes []string) {
	t.Helper()
	return failoverStackWith(t, wf, [][]string{nil}, [][]string{nil, nil})
}

// failoverStackWith starts a prefill sim per entry of prefills and a decode
// sim per entry of decodes (each entry: its extra flags), in deterministic
// mode, and a serve of wf over them in direct pools.
func failoverStackWith(t *testing.T, wf string, prefills, decodes [][]string) (addr string, logs *syncBuf, decodeURLs []string) {
	t.Helper()
	base := []string{"--listen", "127.0.0.1:0", "--deterministic", "--output-tokens", "12"}
	start := func(role string, i int, extra []string) string {
		args := append(append(append([]string{}, base...), "--roles", role, "--name", fmt.Sprintf("%s%d", role[:1], i)), extra...)
		u, stop := runSimAsync(t, args...)
		t.Cleanup(func() { stop() })
		return u
	}
	var ps []string
	for i, extra := range prefills {
		ps = append(ps, start("prefill", i, extra))
	}
	for i, extra := range decodes {
		decodeURLs = append(decodeURLs, start("decode", i, extra))
	}
	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", wf)
	pools := `decode: ["` + strings.Join(decodeURLs, `", "`) + `"]`
	if len(ps) > 0 {
		pools = `prefill: ["` + strings.Join(ps, `", "`) + `"], ` + pools
	}
	cfg := writeFile(t, dir, "serve.yaml", `server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 2s}
upstream:
  mode: direct
  pools: {`+pools+`}
workflow: wf.yaml
`)
	addr, logs = startServe(t, cfg, nil)
	return addr, logs, decodeURLs
}

// reply is what a client assembled from one answer.
type reply struct {
	status  int
	text    string
	ids     []string // every chunk's id (streamed) or the body's
	finish  []string // finish_reasons seen
	usage   []map[string]any
	done    int // [DONE] lines
	raw     string
	objects []string
}

func postFailover(t *testing.T, addr, path, body, fault string) reply {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if fault != "" {
		req.Header.Set("X-Sim-Fault", fault)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the reply: %v (got %q)", err, b)
	}
	r.raw = string(b)
	type choice struct {
		TokenIDs     []int   `json:"token_ids"` // generate: the answer
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Content *string `json:"content"`
		} `json:"delta"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	}
	type chunk struct {
		ID        string         `json:"id"`
		RequestID string         `json:"request_id"` // generate
		Object    string         `json:"object"`
		Choices   []choice       `json:"choices"`
		Usage     map[string]any `json:"usage"`
	}
	add := func(c chunk) {
		r.ids = append(r.ids, c.ID+c.RequestID)
		r.objects = append(r.objects, c.Object)
		for _, ch := range c.Choices {
			if path == "/inference/v1/generate" {
				r.text += fmt.Sprint(ch.TokenIDs) // tokens out: the answer is its ids
			}
			r.text += ch.Text + ch.Message.Content
			if ch.Delta.Content != nil {
				r.text += *ch.Delta.Content
			}
			if ch.FinishReason != nil {
				r.finish = append(r.finish, *ch.FinishReason)
			}
		}
		if c.Usage != nil {
			r.usage = append(r.usage, c.Usage)
		}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var c chunk
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%d %q: %v", resp.StatusCode, b, err)
		}
		add(c)
		return r
	}
	sc := bufio.NewScanner(strings.NewReader(r.raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		d := strings.TrimPrefix(line, "data: ")
		if d == "[DONE]" {
			r.done++
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		add(c)
	}
	return r
}

func TestDecodeFailoverByteIdentity(t *testing.T) {
	for _, wf := range []struct{ name, yaml string }{{"pd", failoverPD}, {"decode-only", failoverDecodeOnly}} {
		t.Run(wf.name, func(t *testing.T) {
			addr, logs, _ := failoverStack(t, wf.yaml)
			for _, tc := range []struct {
				name, path, body string
			}{
				{"chat stream", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":10,"stream":true,"stream_options":{"include_usage":true}}`},
				{"chat stream no usage", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"another story"}],"stream":true}`},
				{"completions stream", "/v1/completions", `{"model":"m","prompt":"once upon a time","max_tokens":10,"stream":true,"stream_options":{"include_usage":true}}`},
				{"generate stream", "/inference/v1/generate", `{"model":"m","token_ids":[1,4321,5432,6543],"sampling_params":{"max_tokens":10,"temperature":0},"stream":true}`},
			} {
				t.Run(tc.name, func(t *testing.T) {
					want := postFailover(t, addr, tc.path, tc.body, "")
					if want.status != 200 || want.text == "" {
						t.Fatalf("unbroken run: %d %q\n%s", want.status, want.raw, logs.String())
					}
					for _, k := range []int{1, 4, 9} {
						before := strings.Count(logs.String(), ":failover=reset/continued")
						got := postFailover(t, addr, tc.path, tc.body, fmt.Sprintf("decode:cut-after=%d", k))
						waitFor(t, "the failover in the summary line", func() bool {
							return strings.Count(logs.String(), ":failover=reset/continued") > before
						})
						if got.status != 200 || got.text != want.text {
							t.Fatalf("cut after %d: %d text %q, want %q\nraw %s\n%s", k, got.status, got.text, want.text, got.raw, logs.String())
						}
						checkOneReply(t, k, got, want)
					}
				})
			}
		})
	}
}

// checkOneReply: one id, one finish, the same usage, one [DONE]; no token
// ids the client did not ask for.
func checkOneReply(t *testing.T, k int, got, want reply) {
	t.Helper()
	for _, id := range got.ids {
		if id != got.ids[0] {
			t.Fatalf("cut after %d: ids %v", k, got.ids)
		}
	}
	for _, o := range got.objects {
		if o != want.objects[0] {
			t.Fatalf("cut after %d: objects %v, want %s", k, got.objects, want.objects[0])
		}
	}
	if fmt.Sprint(got.finish) != fmt.Sprint(want.finish) || got.done != want.done {
		t.Fatalf("cut after %d: finish %v done %d, want %v %d\n%s", k, got.finish, got.done, want.finish, want.done, got.raw)
	}
	if fmt.Sprint(got.usage) != fmt.Sprint(want.usage) {
		t.Fatalf("cut after %d: usage %v, want %v", k, got.usage, want.usage)
	}
	if strings.Contains(got.raw, "token_ids") && !strings.Contains(want.raw, "token_ids") {
		t.Fatalf("cut after %d: token ids reached the client: %s", k, got.raw)
	}
}

// One decode worker of two resets every reply after its first bytes (a
// half-written JSON body; a stream after its first token): every request
// completes with the unbroken answer (computed by the healthy worker
// alone), streamed replies continued, non-streamed ones made again; the
// failovers are in the summary line and in celflow_failovers_total.
func TestDecodeFailoverOneBadWorker(t *testing.T) {
	for _, wf := range []struct{ name, yaml string }{{"pd", failoverPD}, {"decode-only", failoverDecodeOnly}} {
		t.Run(wf.name, func(t *testing.T) {
			addr, logs, decodes := failoverStackWith(t, wf.yaml, [][]string{nil}, [][]string{{"--fault", "decode:reset-mid-stream"}, nil})
			host := strings.TrimPrefix(decodes[1], "http://")
			for _, tc := range []struct{ name, path, body string }{
				{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":10}`},
				{"completions", "/v1/completions", `{"model":"m","prompt":"once upon a time","max_tokens":10}`},
				{"chat stream", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":10,"stream":true,"stream_options":{"include_usage":true}}`},
				{"completions stream", "/v1/completions", `{"model":"m","prompt":"once upon a time","stream":true}`},
			} {
				t.Run(tc.name, func(t *testing.T) {
					want := postFailover(t, host, tc.path, tc.body, "") // the healthy worker alone
					if want.status != 200 || want.text == "" {
						t.Fatalf("healthy worker: %d %s", want.status, want.raw)
					}
					for i := 0; i < 6; i++ {
						got := postFailover(t, addr, tc.path, tc.body, "")
						if got.status != 200 || got.text != want.text {
							t.Fatalf("request %d: %d %q, want %q\n%s", i, got.status, got.text, want.text, logs.String())
						}
						checkOneReply(t, i, got, want)
					}
				})
			}
			// Both pools are picked from evenly: some of the 24 requests went
			// to the bad worker.
			waitFor(t, "a failover in the summary line", func() bool { return strings.Contains(logs.String(), ":failover=reset/continued") })
			m := strings.Join(scrape(t, addr, "celflow_failover"), "\n")
			if !strings.Contains(m, `celflow_failovers_total{node="decode",outcome="continued",reason="reset"}`) ||
				!strings.Contains(m, `celflow_failovers_total{node="decode",outcome="continued",reason="truncated"}`) {
				t.Fatalf("failovers not counted:\n%s", m)
			}
			if st := strings.Join(scrape(t, addr, "celflow_failover_stall_seconds_count"), ""); st == "" || strings.HasSuffix(st, " 0") {
				t.Fatalf("no stall observed: %q", st)
			}
		})
	}
}

// A prefill worker that answers and then loses its KV (kv-drop: a prefill
// that died after answering) makes decode's KV pull fail; with failover on,
// prefill runs again on the other prefill worker and decode again: every
// request completes, and the replays are counted as kv_pull.
func TestDecodeFailoverKVPull(t *testing.T) {
	addr, logs, _ := failoverStackWith(t, failoverPD, [][]string{{"--fault", "prefill:kv-drop"}, nil}, [][]string{nil})
	body := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":4}`
	var want string
	for i := 0; i < 8; i++ {
		got := postFailover(t, addr, "/v1/chat/completions", body, "")
		if got.status != 200 || (want != "" && got.text != want) {
			t.Fatalf("request %d: %d %s\n%s", i, got.status, got.raw, logs.String())
		}
		want = got.text
	}
	waitFor(t, "a kv_pull failover in the summary line", func() bool { return strings.Contains(logs.String(), ":failover=kv_pull/continued") })
	m := strings.Join(scrape(t, addr, "celflow_failovers_total"), "\n")
	if !strings.Contains(m, `celflow_failovers_total{node="decode",outcome="continued",reason="kv_pull"}`) {
		t.Fatalf("kv_pull not counted:\n%s", m)
	}
}

// Requests failover cannot continue exactly end abnormally, as without
// failover, and are counted with the refusal: guided decoding, n > 1,
// logprobs, tools. Nothing is silently corrupted.
func TestDecodeFailoverRefusals(t *testing.T) {
	addr, logs, _ := failoverStack(t, failoverDecodeOnly)
	for _, tc := range []struct{ name, extra, outcome string }{
		{"json_object", `"response_format":{"type":"json_object"}`, "refused_guided"},
		{"guided_regex", `"guided_regex":"[a-z]+"`, "refused_guided"},
		{"n", `"n":2`, "refused_n"},
		{"logprobs", `"logprobs":true,"top_logprobs":2`, "refused_logprobs"},
		{"tools", `"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]`, "refused_tools"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"m","messages":[{"role":"user","content":"a refusal ` + tc.name + `"}],"max_tokens":10,"stream":true,` + tc.extra + `}`
			client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Sim-Fault", "decode:cut-after=3")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil || strings.Contains(string(b), "[DONE]") {
				t.Fatalf("the reply ended normally: %v %s", err, b)
			}
			if strings.Contains(string(b), "token_ids") {
				t.Fatalf("token ids reached the client: %s", b)
			}
			want := `celflow_failovers_total{node="decode",outcome="` + tc.outcome + `",reason="reset"}`
			waitFor(t, want, func() bool {
				return strings.Contains(strings.Join(scrape(t, addr, "celflow_failovers_total"), "\n"), want)
			})
		})
	}
	if t.Failed() {
		t.Log(logs.String())
	}
}

// explain and graph (every format) show a decode node's failover policy;
// a node without the block shows none.
func TestFailoverShownByExplainAndGraph(t *testing.T) {
	dir := t.TempDir()
	wf := writeFile(t, dir, "wf.yaml", failoverPD)
	req := writeFile(t, dir, "req.json", `{"model":"m","prompt":"x"}`)
	const want = "attempts=2 on=reset,idle_timeout,error_event,truncated,kv_pull max_added_time=30s"
	var out, errb strings.Builder
	if code := runExplain([]string{wf, "--request", req, "--route", "completions"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "failover of decode: "+want) {
		t.Fatalf("explain %d: %s%s", code, out.String(), errb.String())
	}
	for _, f := range []string{"json", "mermaid", "dot"} {
		out.Reset()
		if code := runGraph([]string{"--format", f, wf}, &out, &errb); code != 0 || !strings.Contains(out.String(), want) || strings.Count(out.String(), "attempts=2") != 1 {
			t.Fatalf("graph %s %d: %s%s", f, code, out.String(), errb.String())
		}
	}
}

// A decode worker that stalls mid-stream (one token, then silence longer
// than stream_idle_timeout) is failed over for idle_timeout; workers that
// all break every reply use up the attempts, and the reply ends abnormally,
// counted as failed.
func TestDecodeFailoverIdleAndExhausted(t *testing.T) {
	const wf = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: decode-failover, version: "1"}
routes: [chat]
nodes:
  - id: decode
    type: decode
    params:
      stream_idle_timeout: 300ms
      failover: {attempts: 2, on: [idle_timeout, reset]}
`
	body := `{"model":"m","messages":[{"role":"user","content":"a stalled story"}],"max_tokens":8,"stream":true}`
	t.Run("idle", func(t *testing.T) {
		addr, logs, decodes := failoverStackWith(t, wf, nil, [][]string{{"--fault", "decode:itl=10s"}, nil})
		want := postFailover(t, strings.TrimPrefix(decodes[1], "http://"), "/v1/chat/completions", body, "")
		for i := 0; i < 4; i++ {
			got := postFailover(t, addr, "/v1/chat/completions", body, "")
			if got.status != 200 || got.text != want.text || got.done != 1 {
				t.Fatalf("request %d: %d %q, want %q\n%s", i, got.status, got.text, want.text, logs.String())
			}
		}
		waitFor(t, "an idle_timeout failover", func() bool {
			return strings.Contains(strings.Join(scrape(t, addr, "celflow_failovers_total"), "\n"),
				`celflow_failovers_total{node="decode",outcome="continued",reason="idle_timeout"}`)
		})
	})
	t.Run("exhausted", func(t *testing.T) {
		addr, _, _ := failoverStackWith(t, wf, nil, [][]string{{"--fault", "decode:reset-mid-stream"}, {"--fault", "decode:reset-mid-stream"}})
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
		resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || strings.Contains(string(b), "[DONE]") {
			t.Fatalf("the reply ended normally: %v %s", err, b)
		}
		waitFor(t, "a failed failover", func() bool {
			return strings.Contains(strings.Join(scrape(t, addr, "celflow_failovers_total"), "\n"),
				`celflow_failovers_total{node="decode",outcome="failed",reason="reset"}`)
		})
	})
}

// max_added_time bounds the replays: with 5 ms and workers that take
// 300 ms to their first token, the continuation cannot answer in time; the
// reply ends abnormally and is counted as budget.
func TestDecodeFailoverBudget(t *testing.T) {
	const wf = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: decode-failover, version: "1"}
routes: [chat]
nodes:
  - id: decode
    type: decode
    params:
      failover: {attempts: 3, max_added_time: 5ms}
`
	slow := []string{"--ttft", "300ms"}
	addr, _, _ := failoverStackWith(t, wf, nil, [][]string{append([]string{"--fault", "decode:reset-mid-stream"}, slow...), slow})
	body := `{"model":"m","messages":[{"role":"user","content":"a slow story"}],"max_tokens":8,"stream":true}`
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	for i := 0; i < 8; i++ { // until one request went to the breaking worker
		resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && strings.Contains(string(b), "[DONE]") {
			continue // the healthy worker answered
		}
		waitFor(t, "a budget failover", func() bool {
			return strings.Contains(strings.Join(scrape(t, addr, "celflow_failovers_total"), "\n"),
				`celflow_failovers_total{node="decode",outcome="budget",reason="reset"}`)
		})
		return
	}
	t.Fatal("no request went to the breaking worker")
}
