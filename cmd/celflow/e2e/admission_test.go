//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Issue 12, with real processes and the OpenAI Go SDK: at
// admission.max_in_flight the next request gets 429 rate_limit_error
// overloaded with Retry-After, and once the slot frees requests are
// admitted again. The request holding the slot is a decode the simulator
// delays (X-Sim-Fault) until its client leaves, so nothing depends on timing.
func TestAdmissionE2E(t *testing.T) {
	st := startStack(t, stackOpts{workflow: "decode-only.yaml",
		extra: "admission: {max_in_flight: 1, retry_after: 3s}\n"})
	params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(4),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt("admission"))}}
	const inFlight = `celflow_admission_in_flight{route="/v1/chat/completions"}`

	holdCtx, leave := context.WithCancel(context.Background())
	held := make(chan error, 1)
	go func() {
		_, err := st.client().Chat.Completions.New(holdCtx, params,
			reqOpts("e2e-adm-hold", option.WithHeader("X-Sim-Fault", "decode:delay=30s"))...)
		held <- err
	}()
	st.waitMetric(inFlight, "1")

	_, err := st.client().Chat.Completions.New(context.Background(), params, reqOpts("e2e-adm-refused")...)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("at the bound: want an *openai.Error, got %v", err)
	}
	if apiErr.StatusCode != 429 || apiErr.Type != "rate_limit_error" || apiErr.Code != "overloaded" ||
		apiErr.Response.Header.Get("Retry-After") != "3" || !strings.HasSuffix(apiErr.Message, "(request_id: e2e-adm-refused)") {
		t.Fatalf("at the bound: %d %s/%s Retry-After %q %q", apiErr.StatusCode, apiErr.Type, apiErr.Code,
			apiErr.Response.Header.Get("Retry-After"), apiErr.Message)
	}

	leave()
	if err := <-held; err == nil {
		t.Fatal("the held request completed although its client left")
	}
	st.waitMetric(inFlight, "0")
	if _, err := st.client().Chat.Completions.New(context.Background(), params, reqOpts("e2e-adm-after")...); err != nil {
		t.Fatalf("after the slot freed: %v", err)
	}
	if v := st.metric(`celflow_admission_rejected_total{reason="queue_full",route="/v1/chat/completions"}`); v != "1" {
		t.Errorf("rejected queue_full = %q, want 1", v)
	}
}

// metric returns one series' value as exposed ("" when absent).
func (st *stack) metric(series string) string {
	st.t.Helper()
	resp, err := httpc.Get(st.url + "/metrics")
	if err != nil {
		st.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	return ""
}

// waitMetric polls (10 s at most) until the series reads want.
func (st *stack) waitMetric(series, want string) {
	st.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st.metric(series) != want {
		if time.Now().After(deadline) {
			st.t.Fatalf("%s never reached %s (now %q)", series, want, st.metric(series))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
