package flowtest_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
)

// Issue 18, per-model timeouts: a target rule's timeouts apply to the
// requests it is chosen for, and only to them, through the real front,
// prefill and decode against a celflow sim behind the sim gateway. The sim
// delays the leg each case aims at (X-Sim-Fault, forwarded to every leg) by
// one second: the tight model's rule (ttfb_timeout 100ms on decode, timeout
// 100ms on prefill) gives up long before that, 504 upstream_timeout; the
// roomy model's rule (30s) waits for the answer, 200. A stream whose tokens
// come a second apart is cut by its rule's stream_idle_timeout (100ms)
// after the 200, without [DONE], and relayed whole under the roomy rule.
// Without the rules' timeouts applied, every request was answered in full.
func TestTargetRuleTimeoutsApplyPerRule(t *testing.T) {
	worker := startSim(t, "--roles", "prefill,decode", "--name", "w0")
	gateway := startSim(t, "gateway", "--prefill", worker, "--decode", worker)
	up, err := upstream.New(upstream.Config{Gateway: gateway})
	if err != nil {
		t.Fatal(err)
	}
	s := startCELServer(t, "pd-timeouts.yaml", `apiVersion: celflow/v1
kind: Workflow
metadata: {name: pd-timeouts, version: "1"}
routes: [chat]
defaults: {kv_connector: kv-nixl}
nodes:
  - id: prefill
    type: prefill
    target:
      - {if: 'request.model == "tight"', timeout: 100ms}
      - {if: 'request.model == "roomy"', timeout: 30s}
  - id: decode
    type: decode
    needs: [prefill]
    target:
      - {if: 'request.model == "tight"', ttfb_timeout: 100ms}
      - {if: 'request.model == "tight-stream"', stream_idle_timeout: 100ms}
      - {if: 'request.model == "roomy"', ttfb_timeout: 30s, stream_idle_timeout: 30s}
`, up)
	for _, tc := range []struct {
		name, model, fault string
		status             int
		code, node         string
		stream             bool
	}{
		// A relayed stream is cut by the tight rule's stream_idle_timeout
		// after the 200 went out (no [DONE]); the roomy rule's waits.
		{"decode stream_idle_timeout of the tight rule", "tight-stream", "decode:itl=1s", 200, "", "", true},
		{"decode stream_idle_timeout of the roomy rule", "roomy", "decode:itl=1s", 200, "", "", true},
		{"decode ttfb_timeout of the tight rule", "tight", "decode:slow-headers=1s", 504, "upstream_timeout", "decode", false},
		{"decode ttfb_timeout of the roomy rule", "roomy", "decode:slow-headers=1s", 200, "", "", false},
		{"prefill timeout of the tight rule", "tight", "prefill:delay=1s", 504, "upstream_timeout", "prefill", false},
		{"prefill timeout of the roomy rule", "roomy", "prefill:delay=1s", 200, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			status, reply := s.post(t, `{"model":"`+tc.model+`","max_tokens":2,"stream":`+strconv.FormatBool(tc.stream)+`,"messages":[{"role":"user","content":"hello there"}]}`,
				"X-Sim-Fault", tc.fault)
			took := time.Since(start)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, reply)
			}
			if tc.stream {
				if done := strings.Contains(reply, "data: [DONE]"); done != (tc.model == "roomy") {
					t.Fatalf("stream of %s: [DONE] %v after %v:\n%s", tc.model, done, took, reply)
				}
				return
			}
			if tc.status == 200 {
				if took < time.Second {
					t.Fatalf("answered in %v: the fault's one-second delay did not apply", took)
				}
				return
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(reply), &e); err != nil {
				t.Fatalf("reply %q: %v", reply, err)
			}
			if e.Error.Code != tc.code || !strings.Contains(e.Error.Message, tc.node) {
				t.Fatalf("error %+v, want code %s naming %s", e.Error, tc.code, tc.node)
			}
		})
	}
}

// What node/timeout-cuts-reply warns about, through the real front and a
// sim: decode runs its whole relay under its timeout, so a stream that
// outlasts it is cut after the client got HTTP 200, without [DONE] and
// without an error body; bounded by stream_idle_timeout instead (timeout
// 0s), the same slow stream is relayed whole.
func TestNodeTimeoutCutsRelayedStream(t *testing.T) {
	worker := startSim(t, "--roles", "prefill,decode", "--name", "w0")
	gateway := startSim(t, "gateway", "--prefill", worker, "--decode", worker)
	up, err := upstream.New(upstream.Config{Gateway: gateway})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, decode string
		done         bool
	}{
		{"timeout on decode", "timeout: 300ms", false},
		{"stream_idle_timeout instead", "timeout: 0s\n    params: {stream_idle_timeout: 5s}", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startCELServer(t, "pd.yaml", `apiVersion: celflow/v1
kind: Workflow
metadata: {name: pd-cut, version: "1"}
routes: [chat]
defaults: {kv_connector: kv-nixl}
nodes:
  - id: decode
    type: decode
    `+tc.decode+`
`, up)
			// Six tokens 200ms apart: over a second of stream.
			status, reply := s.post(t, `{"model":"m","max_tokens":6,"stream":true,"messages":[{"role":"user","content":"a slow stream"}]}`,
				"X-Sim-Fault", "decode:itl=200ms")
			if status != 200 {
				t.Fatalf("status %d: %s", status, reply)
			}
			if done := strings.Contains(reply, "data: [DONE]"); done != tc.done {
				t.Fatalf("[DONE] %v, want %v:\n%s", done, tc.done, reply)
			}
			if strings.Contains(reply, `"error"`) {
				t.Fatalf("an error in the stream:\n%s", reply)
			}
		})
	}
}
