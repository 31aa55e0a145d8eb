package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// answer is what a client assembled from one reply (choice 0), streamed or
// not.
type answer struct {
	text      string
	ids       []int // token_ids, concatenated over the events
	prompt    []int // prompt_token_ids
	finish    string
	events    int  // content events (streamed)
	done      bool // streamed: [DONE] arrived
	completed int  // usage.completion_tokens (-1 when absent)
	readErr   error
	noReply   bool // readErr came before any response (no status line)
}

// wireReply is the union of the reply shapes the tests read.
type wireReply struct {
	PromptTokenIDs []int `json:"prompt_token_ids"`
	Choices        []struct {
		Text    *string `json:"text"`
		Message *struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason   *string `json:"finish_reason"`
		TokenIDs       []int   `json:"token_ids"`
		PromptTokenIDs []int   `json:"prompt_token_ids"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// ask posts body to url+path and assembles choice 0 of the reply. A reply
// that ends abnormally is returned with readErr set (and what came before).
func ask(t *testing.T, url, path, body string, headers ...string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		return answer{readErr: err, completed: -1, noReply: true}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	a := answer{completed: -1}
	add := func(r wireReply) {
		a.prompt = append(a.prompt, r.PromptTokenIDs...)
		if r.Usage != nil {
			a.completed = r.Usage.CompletionTokens
		}
		for _, c := range r.Choices {
			a.prompt = append(a.prompt, c.PromptTokenIDs...)
			a.ids = append(a.ids, c.TokenIDs...)
			switch {
			case c.Message != nil:
				a.text += c.Message.Content
			case c.Delta != nil && c.Delta.Content != nil:
				a.text += *c.Delta.Content
				if *c.Delta.Content != "" {
					a.events++
				}
			case c.Text != nil:
				a.text += *c.Text
				if *c.Text != "" && c.FinishReason == nil {
					a.events++
				}
			}
			if c.FinishReason != nil {
				a.finish = *c.FinishReason
			}
		}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			a.readErr = err
			return a
		}
		var r wireReply
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("reply %s: %v", b, err)
		}
		add(r)
		return a
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			a.readErr = err
			if err == io.EOF {
				a.readErr = nil
			}
			return a
		}
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			a.done = true
			continue
		}
		var r wireReply
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		add(r)
	}
}

// jsonOf marshals v for a request body.
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// wordsOf is the fake tokenizer's ids of text (no BOS).
func wordsOf(t *testing.T, text string) []int { t.Helper(); return Tokenize(nil, text) }

// A broken answer continued from its prefix gives back exactly the unbroken
// answer: for chat and completions, streamed and not, for several k and
// budgets, with the continuation sent as token ids and as text. Checked
// against a fresh answer that is repeatable and whose ids match its text.
func TestDeterministicContinuation(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 12})
	const prompt = "tell me about failover"
	type leg struct {
		path string
		body func(prefixText string, prefixIDs, promptIDs []int, max int, stream bool) string
	}
	opts := func(m map[string]any, max int, stream bool) string {
		m["temperature"] = 0
		m["max_tokens"] = max
		m["return_token_ids"] = true
		if stream {
			m["stream"] = true
			m["stream_options"] = map[string]any{"include_usage": true}
		}
		return jsonOf(m)
	}
	legs := map[string]leg{
		"chat text": {"/v1/chat/completions", func(pt string, _, _ []int, max int, stream bool) string {
			msgs := []map[string]any{{"role": "user", "content": prompt}}
			if pt != "" {
				msgs = append(msgs, map[string]any{"role": "assistant", "content": pt})
			}
			m := map[string]any{"model": "m", "messages": msgs}
			if pt != "" {
				m["continue_final_message"], m["add_generation_prompt"] = true, false
			}
			return opts(m, max, stream)
		}},
		"chat tokens": {"/v1/chat/completions", func(_ string, ids, promptIDs []int, max int, stream bool) string {
			m := map[string]any{"model": "m", "messages": []map[string]any{{"role": "user", "content": prompt}}}
			if promptIDs != nil {
				m["tokens"] = map[string]any{"token_ids": append(slices.Clone(promptIDs), ids...)}
			}
			return opts(m, max, stream)
		}},
		"completions text": {"/v1/completions", func(pt string, _, _ []int, max int, stream bool) string {
			return opts(map[string]any{"model": "m", "prompt": prompt + " " + pt}, max, stream)
		}},
		"completions ids": {"/v1/completions", func(_ string, ids, promptIDs []int, max int, stream bool) string {
			if promptIDs == nil {
				return opts(map[string]any{"model": "m", "prompt": prompt}, max, stream)
			}
			return opts(map[string]any{"model": "m", "prompt": append(slices.Clone(promptIDs), ids...)}, max, stream)
		}},
	}
	budgets := []struct {
		max        int
		wantN      int
		wantFinish string
	}{{40, 12, "stop"}, {7, 7, "length"}}
	for name, l := range legs {
		for _, stream := range []bool{false, true} {
			for _, b := range budgets {
				t.Run(fmt.Sprintf("%s/stream=%v/max=%d", name, stream, b.max), func(t *testing.T) {
					whole := ask(t, srv.URL, l.path, l.body("", nil, nil, b.max, stream))
					if whole.readErr != nil || len(whole.ids) != b.wantN || whole.finish != b.wantFinish || whole.completed != b.wantN {
						t.Fatalf("unbroken: %+v", whole)
					}
					if stream && (!whole.done || whole.events != b.wantN) {
						t.Fatalf("unbroken stream: %+v", whole)
					}
					if !slices.Equal(wordsOf(t, whole.text), whole.ids) || !slices.Equal(whole.prompt, Tokenize([]int{BOS}, prompt)) {
						t.Fatalf("ids do not match the text: %+v", whole)
					}
					for _, w := range strings.Fields(whole.text) {
						if !slices.Contains(detVocab, w) {
							t.Fatalf("word %q is not the deterministic vocabulary: %q", w, whole.text)
						}
					}
					if again := ask(t, srv.URL, l.path, l.body("", nil, nil, b.max, stream)); again.text != whole.text || !slices.Equal(again.ids, whole.ids) {
						t.Fatalf("not repeatable: %q then %q", whole.text, again.text)
					}
					words := strings.SplitAfter(whole.text, " ")
					for _, k := range []int{1, 2, 5, b.wantN - 1, b.wantN} {
						if k == b.wantN && b.wantFinish == "length" {
							continue // no budget left: nothing to continue
						}
						prefixText := strings.TrimSuffix(strings.Join(words[:k], ""), " ")
						rest := ask(t, srv.URL, l.path, l.body(prefixText, whole.ids[:k], whole.prompt, b.max-k, stream))
						if rest.readErr != nil || rest.finish != whole.finish || rest.completed != b.wantN-k {
							t.Fatalf("k=%d: continuation %+v", k, rest)
						}
						if got := prefixText + rest.text; got != whole.text {
							t.Errorf("k=%d: prefix+continuation %q, want %q", k, got, whole.text)
						}
						if got := append(slices.Clone(whole.ids[:k]), rest.ids...); !slices.Equal(got, whole.ids) {
							t.Errorf("k=%d: ids %v, want %v", k, got, whole.ids)
						}
					}
				})
			}
		}
	}
}

// The generate route (tokens in, token ids out) continues the same way, and
// its answer is the completions answer of the same prompt.
func TestDeterministicGenerate(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 10})
	prompt := Tokenize([]int{BOS}, "tokens in")
	gen := func(ids []int, max int) answer {
		return ask(t, srv.URL, "/inference/v1/generate", jsonOf(map[string]any{"token_ids": ids,
			"sampling_params": map[string]any{"temperature": 0, "max_tokens": max}}))
	}
	whole := gen(prompt, 20)
	comp := ask(t, srv.URL, "/v1/completions", jsonOf(map[string]any{"prompt": prompt, "temperature": 0, "max_tokens": 20, "return_token_ids": true}))
	if len(whole.ids) != 10 || whole.finish != "stop" || !slices.Equal(whole.ids, comp.ids) {
		t.Fatalf("generate %+v, completions %+v", whole, comp)
	}
	for _, k := range []int{1, 4, 9, 10} {
		rest := gen(append(slices.Clone(prompt), whole.ids[:k]...), 20-k)
		if got := append(slices.Clone(whole.ids[:k]), rest.ids...); !slices.Equal(got, whole.ids) || rest.finish != "stop" {
			t.Errorf("k=%d: %v (%s), want %v", k, got, rest.finish, whole.ids)
		}
	}
}

// Who is deterministic: --deterministic answers every request so,
// temperature 0 asks for it per request, anything else keeps the classic
// answer (a function of the whole prompt). min_tokens holds off the
// natural end as vLLM's does, and prompts differ in their answers.
func TestDeterministicSelection(t *testing.T) {
	_, plain := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 6})
	_, det := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 6, Deterministic: true})
	body := func(p string, extra string) string { return `{"prompt":` + jsonOf(p) + extra + `}` }
	isDet := func(text string) bool {
		for _, w := range strings.Fields(text) {
			if !slices.Contains(detVocab, w) {
				return false
			}
		}
		return true
	}
	cases := []struct {
		name  string
		url   string
		body  string
		det   bool
		count int
	}{
		{"plain worker, no temperature", plain.URL, body("x", ""), false, 6},
		{"plain worker, temperature 0.7", plain.URL, body("x", `,"temperature":0.7`), false, 6},
		{"plain worker, seed only", plain.URL, body("x", `,"seed":7`), false, 6},
		{"plain worker, temperature 0", plain.URL, body("x", `,"temperature":0`), true, 6},
		{"plain worker, temperature 0.0", plain.URL, body("x", `,"temperature":0.0`), true, 6},
		{"deterministic worker", det.URL, body("x", `,"temperature":0.9`), true, 6},
		{"min_tokens past the end", det.URL, body("x", `,"min_tokens":9`), true, 9},
		// Values the simulator never read before stay accepted (and mean nothing).
		{"odd values", plain.URL, body("x", `,"temperature":"0","return_token_ids":"yes"`), false, 6},
	}
	for _, tc := range cases {
		a := ask(t, tc.url, "/v1/completions", tc.body)
		if a.readErr != nil || isDet(a.text) != tc.det || len(strings.Fields(a.text)) != tc.count || a.finish != "stop" || a.ids != nil {
			t.Errorf("%s: %+v", tc.name, a)
		}
	}
	seen := map[string]bool{}
	for _, p := range []string{"one", "two", "three", "four"} {
		seen[ask(t, det.URL, "/v1/completions", body(p, "")).text] = true
	}
	if len(seen) < 4 {
		t.Errorf("4 prompts gave %d answers: %v", len(seen), seen)
	}
	// A prompt already at its natural end answers nothing, with "stop".
	whole := ask(t, det.URL, "/v1/completions", body("x", ""))
	if a := ask(t, det.URL, "/v1/completions", body("x "+whole.text, "")); a.text != "" || a.finish != "stop" || a.completed != 0 {
		t.Errorf("at the end: %+v", a)
	}
}

// return_token_ids follows vLLM's shapes: chat puts the prompt's ids at
// the top level (first event when streamed), completions in the choice
// (each choice's first event); each choice or event carries its tokens'
// ids. Without it the replies are unchanged, and the openai-go client
// reads the streams with ids.
func TestReturnTokenIDs(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 4})
	chat := `{"messages":[{"role":"user","content":"ids please"}],"max_tokens":3`
	comp := `{"prompt":"ids please","max_tokens":3`
	prompt := Tokenize([]int{BOS}, "ids please")
	for _, tc := range []struct {
		path, body string
	}{{"/v1/chat/completions", chat}, {"/v1/completions", comp}} {
		for _, stream := range []bool{false, true} {
			s := ""
			if stream {
				s = `,"stream":true`
			}
			off := ask(t, srv.URL, tc.path, tc.body+s+"}")
			on := ask(t, srv.URL, tc.path, tc.body+s+`,"return_token_ids":true}`)
			if off.ids != nil || off.prompt != nil {
				t.Errorf("%s stream=%v: ids without asking: %+v", tc.path, stream, off)
			}
			if !slices.Equal(on.prompt, prompt) || len(on.ids) != 3 || !slices.Equal(on.ids, wordsOf(t, on.text)) || on.text != off.text {
				t.Errorf("%s stream=%v: %+v (without ids: %+v)", tc.path, stream, on, off)
			}
		}
	}
	// Raw shapes: where each field sits.
	_, _, b := post(t, srv.URL+"/v1/chat/completions", chat+`,"return_token_ids":true}`)
	m := decodeJSON(t, b)
	if _, ok := m["prompt_token_ids"]; !ok {
		t.Errorf("chat: no top-level prompt_token_ids: %s", b)
	}
	if _, ok := m["choices"].([]any)[0].(map[string]any)["token_ids"]; !ok {
		t.Errorf("chat: no choices[0].token_ids: %s", b)
	}
	_, _, b = post(t, srv.URL+"/v1/completions", comp+`,"return_token_ids":true}`)
	ch := decodeJSON(t, b)["choices"].([]any)[0].(map[string]any)
	if ch["prompt_token_ids"] == nil || ch["token_ids"] == nil {
		t.Errorf("completions: choice lacks ids: %s", b)
	}
	_, _, b = post(t, srv.URL+"/v1/chat/completions", chat+`,"stream":true,"return_token_ids":true}`)
	events := bytes.Split(bytes.TrimSpace(b), []byte("\n\n"))
	if !bytes.Contains(events[0], []byte(`"prompt_token_ids"`)) || bytes.Contains(events[1], []byte(`"prompt_token_ids"`)) ||
		!bytes.Contains(events[1], []byte(`"token_ids":[`)) {
		t.Errorf("chat stream events: %s", b)
	}

	c := client(srv.URL)
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("ids please")}},
		option.WithJSONSet("return_token_ids", true))
	var text string
	for st.Next() {
		if ev := st.Current(); len(ev.Choices) > 0 {
			text += ev.Choices[0].Delta.Content
		}
	}
	if st.Err() != nil || len(strings.Fields(text)) != 4 {
		t.Errorf("openai-go stream: %q %v", text, st.Err())
	}
}

// The deterministic vocabulary tokenizes one id per word, all distinct and
// none a placeholder or BOS (init panics on a clash; this names it).
func TestDeterministicVocabulary(t *testing.T) {
	if len(detIDs) != len(detVocab) {
		t.Fatalf("%d ids for %d words", len(detIDs), len(detVocab))
	}
	for id := range detIDs {
		if id == BOS || id >= ImageToken && id < ImageToken+10 {
			t.Errorf("id %d is reserved", id)
		}
	}
	d := newDeterm(append(Tokenize([]int{BOS}, "q"), WordID("alfa"), WordID("zulu")))
	if d.tail != 2 || d.seed != seedOf(Tokenize([]int{BOS}, "q")) {
		t.Errorf("split: %+v", d)
	}
	if d := newDeterm([]int{WordID("alfa")}); d.tail != 1 || d.seed != seedOf(nil) {
		t.Errorf("all-answer prompt: %+v", d)
	}
}
