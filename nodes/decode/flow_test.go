package decode_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
	_ "github.com/celflow/celflow/nodes/conditionaldecode"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
	_ "github.com/celflow/celflow/nodes/prefill"
)

// These tests run the worker node types through the real loader and
// scheduler against one fake gateway that answers by EPP-Profile.

const cdpd = `
apiVersion: celflow/v1
kind: Workflow
metadata: {name: cdpd, version: "1"}
defaults: {kv_connector: kv-nixl}
nodes:
  - id: try_decode
    type: conditional-decode
  - id: prefill
    type: prefill
    needs: [{node: try_decode, if: "response.status == 412 || response.status >= 500"}]
  - id: decode
    type: decode
    needs: [prefill]
`

// gateway scripts one answer per EPP-Profile (decode with Prefer is "cd").
type gateway struct {
	mu      sync.Mutex
	answers map[string]func(http.ResponseWriter)
	legs    []legtest.Call
}

func (g *gateway) handle(w http.ResponseWriter, r *http.Request, c legtest.Call) {
	role := r.Header.Get("Epp-Profile")
	if r.Header.Get("Prefer") == "if-available" {
		role = "cd"
	}
	g.mu.Lock()
	g.legs = append(g.legs, c)
	a := g.answers[role]
	g.mu.Unlock()
	if a == nil {
		w.WriteHeader(599)
		return
	}
	a(w)
}

func (g *gateway) roles() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var rs []string
	for _, c := range g.legs {
		r := c.Header.Get("Epp-Profile")
		if c.Header.Get("Prefer") != "" {
			r = "cd"
		}
		rs = append(rs, r)
	}
	return strings.Join(rs, ",")
}

func answer(status int, ct, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func serve(t *testing.T, yaml string, answers map[string]func(http.ResponseWriter)) (*engine.Report, *httptest.ResponseRecorder, *gateway) {
	t.Helper()
	g := &gateway{answers: answers}
	w := legtest.NewWorker(t, g.handle)
	wf, ds := engine.Load("flow.yaml", []byte(yaml), engine.LoadOptions{Upstream: legtest.Gateway(t, w.URL), WriteTimeout: 5 * time.Second})
	if ds.HasErrors() {
		t.Fatal(ds)
	}
	run, rec := legtest.Run(t, engine.RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"seed":12345678901234567890}`, nil)
	return wf.Serve(run), rec, g
}

const prefillOK = `{"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":"e-1","remote_host":"10.0.0.42"}}`

// ACCEPTANCE 36, 143, 144
func TestFlowMissTakesFullPath(t *testing.T) {
	rep, rec, g := serve(t, cdpd, map[string]func(http.ResponseWriter){
		"cd":      answer(412, "application/json", `{"error":"miss"}`),
		"prefill": answer(200, "application/json", prefillOK),
		"decode":  answer(200, "application/json", `{"answer":42}`),
	})
	if rep.Err != nil || !rep.Answered || rec.Body.String() != `{"answer":42}` || g.roles() != "cd,prefill,decode" {
		t.Fatalf("err %v answered %v body %q legs %s", rep.Err, rep.Answered, rec.Body, g.roles())
	}
	var body struct {
		KV map[string]any `json:"kv_transfer_params"`
	}
	_ = json.Unmarshal(g.legs[2].Body, &body)
	if body.KV["remote_engine_id"] != "e-1" || body.KV["do_remote_prefill"] != true || !strings.Contains(string(g.legs[2].Body), `"seed":12345678901234567890`) {
		t.Fatalf("decode body %s", g.legs[2].Body)
	}
}

// ACCEPTANCE 37
func TestFlowHitEndsRun(t *testing.T) {
	rep, rec, g := serve(t, cdpd, map[string]func(http.ResponseWriter){
		"cd": answer(200, "text/event-stream", "data: [DONE]\n\n"),
	})
	if rep.Err != nil || !rep.Answered || rec.Body.String() != "data: [DONE]\n\n" || g.roles() != "cd" {
		t.Fatalf("err %v body %q legs %s", rep.Err, rec.Body, g.roles())
	}
	for _, o := range rep.Outcomes {
		if o.Node != "try_decode" && (o.Status != engine.StatusSkipped || o.Reason != "ended") {
			t.Fatalf("%s: %s (%s)", o.Node, o.Status, o.Reason)
		}
	}
}

// ACCEPTANCE 38
func TestFlow5xxRouted(t *testing.T) {
	rep, rec, g := serve(t, cdpd, map[string]func(http.ResponseWriter){
		"cd":      answer(503, "application/json", `{}`),
		"prefill": answer(200, "application/json", prefillOK),
		"decode":  answer(200, "application/json", `{"ok":1}`),
	})
	if rep.Err != nil || rec.Body.String() != `{"ok":1}` || g.roles() != "cd,prefill,decode" {
		t.Fatalf("err %v body %q legs %s", rep.Err, rec.Body, g.roles())
	}
}

// ACCEPTANCE 142, 167: an unrouted prefill failure fails the run; decode is never sent.
func TestFlowPrefillFails(t *testing.T) {
	for _, tc := range []struct {
		name, reply string
		status      int
		code        string
	}{
		{"422", `{"error":{"message":"nope"}}`, 422, "upstream_rejected"},
		{"no handoff", `{"id":"x"}`, 200, "upstream_protocol_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, rec, g := serve(t, cdpd, map[string]func(http.ResponseWriter){
				"cd":      answer(412, "application/json", `{}`),
				"prefill": answer(tc.status, "application/json", tc.reply),
				"decode":  answer(200, "application/json", `{}`),
			})
			if rep.Err == nil || rep.Err.Code() != tc.code || rep.Answered || rec.Body.Len() != 0 || g.roles() != "cd,prefill" {
				t.Fatalf("err %v answered %v legs %s", rep.Err, rep.Answered, g.roles())
			}
			if tc.status == 422 && !strings.Contains(rep.Err.ClientMessage("r"), "prefill rejected the request: HTTP 422: nope") {
				t.Fatalf("message %q", rep.Err.ClientMessage("r"))
			}
		})
	}
}

// ACCEPTANCE 179: a reply that breaks after it started is reported with the
// run answered, so the front ends the reply abnormally.
func TestFlowDecodeBreaksMidBody(t *testing.T) {
	rep, _, _ := serve(t, cdpd, map[string]func(http.ResponseWriter){
		"cd":      answer(412, "application/json", `{}`),
		"prefill": answer(200, "application/json", prefillOK),
		"decode": func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, `{"partial":`)
		},
	})
	if !rep.Answered || rep.Err == nil || rep.Err.Code() != "bad_gateway" {
		t.Fatalf("answered %v err %v", rep.Answered, rep.Err)
	}
}
