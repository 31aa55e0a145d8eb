package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A guard over tokens.count on generate sees the body's own token_ids, and
// an edge whose predecessor was skipped says it was not evaluated (issue 13).
const explainGenerateWF = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: gen, version: "1"}
routes: [generate]
defaults: {kv_connector: kv-nixl}
nodes:
  - id: try_decode
    type: conditional-decode
    when: tokens.count > 4
  - id: prefill
    type: prefill
    needs: [{node: try_decode, if: response.status == 412}]
  - id: decode
    type: decode
    needs: [prefill]
`

func TestExplainGenerateAndSkippedEdge(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "gen.yaml")
	os.WriteFile(wf, []byte(explainGenerateWF), 0o644)
	short := filepath.Join(dir, "short.json")
	os.WriteFile(short, []byte(`{"model":"m","token_ids":[1,2,3]}`), 0o644)
	long := filepath.Join(dir, "long.json")
	os.WriteFile(long, []byte(`{"model":"m","token_ids":[1,2,3,4,5,6]}`), 0o644)
	none := filepath.Join(dir, "none.json")
	os.WriteFile(none, []byte(`{"model":"m","prompt":"hi"}`), 0o644)

	// --tokens 100 must not matter: generate's T is its token_ids.
	code, out, errs := runCmd(explainC, wf, "--route", "generate", "--request", short, "--tokens", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"try_decode  skipped    guard false: tokens.count > 4",
		"prefill     ran        succeeded; via try_decode (skipped: edge not evaluated)"} {
		if !strings.Contains(out, s) {
			t.Errorf("short prompt lacks %q:\n%s", s, out)
		}
	}
	code, out, errs = runCmd(explainC, wf, "--route", "generate", "--request", long, "--tokens", "1", "--assume", "try_decode=412")
	if code != 0 || !strings.Contains(out, "via try_decode[response.status == 412]") {
		t.Errorf("long prompt: exit %d %s\n%s", code, errs, out)
	}
	code, _, errs = runCmd(explainC, wf, "--route", "generate", "--request", none)
	if code != 2 || !strings.Contains(errs, "token_ids: required") {
		t.Errorf("no token_ids: exit %d: %s", code, errs)
	}
}

// explain --trace prints the server span and a span per node with the
// provenance attributes serve exports.
func TestExplainTrace(t *testing.T) {
	req := filepath.Join(t.TempDir(), "req.json")
	os.WriteFile(req, []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/cat.png"}}]}]}`), 0o644)
	code, out, errs := runCmd(explainC, validEPD, "--request", req, "--assume", "try_decode=412", "--trace")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	_, spans, _ := strings.Cut(out, "\nspans:\n")
	for _, s := range []string{
		"POST /v1/chat/completions\n",
		"\n  try_decode\n",
		"celflow.handled = true",
		"celflow.edge = try_decode[response.status == 412]",
		"\n    encode[0]\n", // the item span under its node
		"http.response.status_code = 200",
	} {
		if !strings.Contains(spans, s) {
			t.Errorf("spans lack %q:\n%s", s, spans)
		}
	}
}

// explain builds the request as serve does (issue 18): the front's own
// entry. Host never reaches request.headers (net/http keeps it apart), the
// id is a real one (a client x-request-id kept, else a fresh UUID), and
// fetch-media's items carry their type and decoded size.
const explainEntryWF = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: entry}
routes: [chat]
defaults: {kv_connector: kv-nixl}
nodes:
  - id: fetch
    type: fetch-media
  - id: try_decode
    type: conditional-decode
    needs: [fetch]
    when: >-
      !("host" in request.headers) && request.headers[?"x-tenant"].orValue("") == "acme" &&
      size(request.id) == 36 && request.id != "explain" &&
      size(media) == 2 && media[0].type == "image/png" && media[0].size == 3 &&
      media[1].type == "image/jpeg" && media[1].size == 0 && media[1].remote
  - id: decode
    type: decode
    needs: [{node: try_decode, if: response.status == 412}]
`

func TestExplainIsServeEntry(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "entry.yaml")
	os.WriteFile(wf, []byte(explainEntryWF), 0o644)
	req := filepath.Join(dir, "req.json")
	// "AAEC" is 3 bytes; the remote item is typed by its extension, size unknown.
	os.WriteFile(req, []byte(`{"model":"m","messages":[{"role":"user","content":[
		{"type":"image_url","image_url":{"url":"data:image/png;base64,AAEC"}},
		{"type":"image_url","image_url":{"url":"https://x/cat.jpg"}}]}]}`), 0o644)
	code, out, errs := runCmd(explainC, wf, "--request", req, "--header", "Host: celflow.example", "--header", "x-tenant: acme")
	if code != 0 || !strings.Contains(out, "try_decode  ran        answered the client, HTTP 200") {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	// A client id that matches the pattern is kept, as serve keeps it: the
	// guard's size(request.id) == 36 is then false.
	code, out, _ = runCmd(explainC, wf, "--request", req, "--header", "x-tenant: acme", "--header", "X-Request-Id: abc")
	if code != 0 || !strings.Contains(out, "try_decode  skipped    guard false") {
		t.Fatalf("client id: exit %d\n%s", code, out)
	}
}

// explain refuses what serve refuses at entry (exit 2, the status and
// message serve answers), and a malformed --header.
func TestExplainRefusesInvalidInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, body, want string }{
		{"empty", ``, "serve answers HTTP 400 invalid_json before any node runs"},
		{"not json", `{"model":`, "serve answers HTTP 400 invalid_json"},
		{"array", `[1]`, "request body must be a JSON object"},
		{"dup", `{"model":"a","model":"b"}`, "HTTP 400"},
	} {
		req := filepath.Join(dir, "req.json")
		os.WriteFile(req, []byte(c.body), 0o644)
		code, out, errs := runCmd(explainC, validEPD, "--request", req)
		if code != 2 || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%s: exit %d, stderr %q, stdout %q", c.name, code, errs, out)
		}
	}
	req := filepath.Join(dir, "ok.json")
	os.WriteFile(req, []byte(`{"model":"m"}`), 0o644)
	for _, h := range []string{"no colon", "bad name: x", ": empty"} {
		if code, _, errs := runCmd(explainC, validEPD, "--request", req, "--header", h); code != 2 || !strings.Contains(errs, "--header") {
			t.Errorf("--header %q: exit %d %s", h, code, errs)
		}
	}
}

// An async workflow: one path per mode header when the request sends
// none, the 202 of enqueue; a mode header given with --header is the one
// path shown.
const explainAsyncWF = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: async}
routes: [chat]
nodes:
  - id: async
    type: async-broker
  - id: decode
    type: decode
    needs: [{node: async, if: outcome.status == "succeeded"}]
`

func TestExplainAsyncModes(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "async.yaml")
	os.WriteFile(wf, []byte(explainAsyncWF), 0o644)
	req := filepath.Join(dir, "req.json")
	os.WriteFile(req, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), 0o644)
	code, out, errs := runCmd(explainC, wf, "--request", req)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{
		"with no x-llm-d-async-mode header:\nasync   ran        succeeded\ndecode  ran        answered the client, HTTP 200",
		"with x-llm-d-async-mode: passthrough:\nasync   ran        succeeded\n",
		"with x-llm-d-async-mode: enqueue:\nasync   ran        answered the client, HTTP 202\ndecode  skipped",
		"with x-llm-d-async-mode: wait:\nasync   ran        answered the client, HTTP 200\n",
		// async.wait_cap: a wait whose run is still going at the cap gets 202.
		"with x-llm-d-async-mode: wait, still running at async.wait_cap:\nasync   ran        answered the client, HTTP 202\ndecode  skipped",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("lacks %q:\n%s", s, out)
		}
	}
	code, out, _ = runCmd(explainC, wf, "--request", req, "--header", "x-llm-d-async-mode: enqueue")
	if code != 0 || strings.Contains(out, "with ") || !strings.Contains(out, "async   ran        answered the client, HTTP 202") {
		t.Errorf("enqueue header: exit %d\n%s", code, out)
	}
	// A wait chosen with --header: within the cap and past it.
	code, out, _ = runCmd(explainC, wf, "--request", req, "--header", "x-llm-d-async-mode: wait")
	if code != 0 || !strings.Contains(out, "with x-llm-d-async-mode: wait, answered within async.wait_cap:\nasync   ran        answered the client, HTTP 200\n") ||
		!strings.Contains(out, "with x-llm-d-async-mode: wait, still running at async.wait_cap:\nasync   ran        answered the client, HTTP 202\n") {
		t.Errorf("wait header: exit %d\n%s", code, out)
	}
	code, out, _ = runCmd(explainC, wf, "--request", req, "--header", "x-llm-d-async-mode: bogus")
	if code != 0 || !strings.Contains(out, "result: HTTP 400 invalid_request") {
		t.Errorf("bad mode: exit %d\n%s", code, out)
	}
}

// The tests: block runs the same path: a test that expects the enqueue's
// 202 gets it (not "got 200"), a refused mode its 400, and no test sees a
// Host header or the id "explain".
func TestTestsBlockIsServePath(t *testing.T) {
	wf := filepath.Join(t.TempDir(), "async.yaml")
	os.WriteFile(wf, []byte(explainAsyncWF+`tests:
  - name: enqueue answers 202
    request: {headers: {x-llm-d-async-mode: enqueue}, body: {model: m, messages: [{role: user, content: hi}]}}
    expect: {ran: [async], skipped: [decode], answered_by: async, status: 202}
  - name: wait answers the result
    request: {headers: {x-llm-d-async-mode: wait}, body: {model: m, messages: [{role: user, content: hi}]}}
    expect: {answered_by: async, status: 200}
  - name: a wait still running at async.wait_cap answers 202
    request: {headers: {x-llm-d-async-mode: wait}, body: {model: m, messages: [{role: user, content: hi}]}}
    assume: {async: 202}
    expect: {answered_by: async, skipped: [decode], status: 202}
  - name: enqueue without a model is refused
    request: {headers: {x-llm-d-async-mode: enqueue}, body: {messages: [{role: user, content: hi}]}}
    expect: {failed: [async], status: 400, code: invalid_request}
  - name: a bad mode is refused
    request: {headers: {x-llm-d-async-mode: bogus}, body: {model: m}}
    expect: {failed: [async], status: 400, code: invalid_request}
`), 0o644)
	code, out, errs := runCmd(testC, wf)
	if code != 0 || !strings.Contains(out, "ok   ") {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	// The same file under validate, which runs the tests too.
	if code, out, _ := runCmd(validate, wf); code != 0 {
		t.Fatalf("validate: exit %d\n%s", code, out)
	}
}

// graph --format json: the documented shape (docs/workflow-reference.md,
// celflow graph), compared with its golden; -update-graph rewrites it.
var updateGraph = flag.Bool("update-graph", false, "rewrite testdata/workflows/valid/epd.graph.json")

func TestGraphJSON(t *testing.T) {
	code, out, errs := runCmd(graphC, "--format", "json", validEPD)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	golden := strings.TrimSuffix(validEPD, ".yaml") + ".graph.json"
	if *updateGraph {
		os.WriteFile(golden, []byte(out), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("graph json differs from %s:\n%s", golden, out)
	}
	var g struct {
		Nodes []map[string]any
		Edges []struct{ From, To, If string }
	}
	if err := json.Unmarshal([]byte(out), &g); err != nil || len(g.Nodes) == 0 || len(g.Edges) == 0 {
		t.Fatalf("not the documented shape: %v\n%s", err, out)
	}
	if code, _, _ := runCmd(graphC, "--format", "yaml", validEPD); code != 2 {
		t.Errorf("unknown format: exit %d", code)
	}
}
