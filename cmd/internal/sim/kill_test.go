package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// cut-after=K ends a reply after K tokens with an abnormal end the client
// sees: a stream stops after exactly K token events with no finish event
// and no [DONE] (the chunked body lacks its terminating chunk), a JSON reply
// never comes. K past the answer does nothing; the record names the fault.
func TestFaultCutAfter(t *testing.T) {
	w, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 6})
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := `{"prompt":"cut me","messages":[{"role":"user","content":"cut me"}]`
		for _, stream := range []bool{false, true} {
			b := body + "}"
			if stream {
				b = body + `,"stream":true}`
			}
			for _, k := range []int{0, 1, 3, 6, 7} {
				name := fmt.Sprintf("%s stream=%v cut-after=%d", path, stream, k)
				w.Records().Clear()
				a := ask(t, srv.URL, path, b, FaultHeader+": decode:cut-after="+fmt.Sprint(k))
				if k > 6 {
					if a.readErr != nil || a.finish != "stop" || len(strings.Fields(a.text)) != 6 {
						t.Errorf("%s: want a whole answer, got %+v", name, a)
					}
					continue
				}
				if a.readErr == nil || a.finish != "" || a.done {
					t.Errorf("%s: want an abnormal end, got %+v", name, a)
				}
				if !stream && !a.noReply {
					t.Errorf("%s: a response came (%+v); want none", name, a)
				}
				if stream && (!errors.Is(a.readErr, io.ErrUnexpectedEOF) || a.events != k) {
					t.Errorf("%s: %d token events, error %v; want %d and an unexpected EOF", name, a.events, a.readErr, k)
				}
				p := waitRecords(t, w.Records(), func(p RecordsPage) bool { return len(p.Records) == 1 && p.Records[0].Done })
				if r := p.Records[0]; r.Fault != fmt.Sprintf("cut-after=%d", k) {
					t.Errorf("%s: record fault %q", name, r.Fault)
				}
			}
		}
	}
}

// In deterministic mode K counts from the prompt's base, so the same
// header fault rides on a continuation without cutting it again: a run cut
// after K tokens and continued assembles the unbroken answer.
func TestFaultCutAfterContinues(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 10, Deterministic: true})
	req := func(prompt string, max int) string {
		return jsonOf(map[string]any{"messages": []map[string]any{{"role": "user", "content": prompt}},
			"max_tokens": max, "stream": true, "return_token_ids": true})
	}
	whole := ask(t, srv.URL, "/v1/chat/completions", req("go on", 12))
	for _, k := range []int{1, 4, 9, 10} {
		fault := FaultHeader + ": decode:cut-after=" + fmt.Sprint(k)
		cut := ask(t, srv.URL, "/v1/chat/completions", req("go on", 12), fault)
		if cut.readErr == nil || cut.events != k {
			t.Fatalf("k=%d: cut %+v", k, cut)
		}
		rest := ask(t, srv.URL, "/v1/chat/completions", req("go on "+cut.text, 12-k), fault)
		if rest.readErr != nil || !rest.done || cut.text+rest.text != whole.text || rest.finish != whole.finish {
			t.Errorf("k=%d: %q + %q (%+v), want %q", k, cut.text, rest.text, rest, whole.text)
		}
	}
}

// Over HTTP/2 (a real TLS + h2 handshake) the cut resets the stream: the
// client reads K token events, then a stream error.
func TestFaultCutAfterHTTP2(t *testing.T) {
	w, err := NewWorker(Config{Roles: []Role{RoleDecode}, OutputTokens: 6, SharedDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(w)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"h2","stream":true}`))
	req.Header.Set(FaultHeader, "cut-after=2")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s, want HTTP/2", resp.Proto)
	}
	events := 0
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF || !strings.Contains(err.Error(), "stream error") {
				t.Errorf("read error %v, want a stream reset", err)
			}
			break
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	if events != 2 {
		t.Errorf("%d events before the reset, want 2", events)
	}
}

// exit-after=K ends the worker process after K tokens of a stream: the
// client's stream stops after K events with an unexpected EOF and the
// process exits with FaultExitCode. The worker is a real child process
// (this test binary re-run as celflow-sim).
func TestFaultExitAfter(t *testing.T) {
	if os.Getenv("CELFLOW_SIM_CHILD") == "1" {
		return // the child's own run of this test: nothing to do
	}
	for _, stream := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSimChild$")
		cmd.Env = append(os.Environ(), "CELFLOW_SIM_CHILD=1",
			"CELFLOW_SIM_ARGS=--listen 127.0.0.1:0 --roles decode --output-tokens 8 --fault decode:exit-after=3")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var url string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				url = u
				break
			}
		}
		if url == "" {
			cancel()
			cmd.Wait()
			t.Fatalf("child did not listen: %s", stderr.String())
		}
		go io.Copy(io.Discard, out)
		body := `{"prompt":"die"}`
		if stream {
			body = `{"prompt":"die","stream":true}`
		}
		a := ask(t, url, "/v1/completions", body)
		err = cmd.Wait()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != FaultExitCode {
			t.Errorf("stream=%v: child ended with %v, want exit %d (stderr %q)", stream, err, FaultExitCode, stderr.String())
		}
		if !strings.Contains(stderr.String(), "exit-after") {
			t.Errorf("stream=%v: stderr %q does not say why", stream, stderr.String())
		}
		if a.readErr == nil || a.done || a.finish != "" {
			t.Errorf("stream=%v: want an abnormal end, got %+v", stream, a)
		}
		if !stream && !a.noReply {
			t.Errorf("non-stream: a response came (%+v); want none", a)
		}
		if stream && (a.events != 3 || !errors.Is(a.readErr, io.ErrUnexpectedEOF)) {
			t.Errorf("stream: %d events, error %v; want 3 and an unexpected EOF", a.events, a.readErr)
		}
	}
}

// TestSimChild is the child process of TestFaultExitAfter: it runs Main
// with CELFLOW_SIM_ARGS until its fault ends the process (or 30 s pass).
func TestSimChild(t *testing.T) {
	if os.Getenv("CELFLOW_SIM_CHILD") != "1" {
		t.Skip("runs only as TestFaultExitAfter's child process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	os.Exit(Main(ctx, strings.Fields(os.Getenv("CELFLOW_SIM_ARGS")), os.Stdout, os.Stderr))
}

// A P/D replay as issue 19's failover runs it, with the real KV hand-off:
// the decode is cut after k tokens, then the prompt's ids plus the k
// generated ids go through a fresh prefill and a decode on another worker
// (which pulls that prefill's KV); the assembled answer equals an unbroken
// P/D run's, in text and ids.
func TestDeterministicPDReplay(t *testing.T) {
	_, pre := startWorker(t, Config{Name: "p1", Roles: []Role{RolePrefill}, OutputTokens: 9})
	_, d1 := startWorker(t, Config{Name: "d1", Roles: []Role{RoleDecode}, OutputTokens: 9})
	_, d2 := startWorker(t, Config{Name: "d2", Roles: []Role{RoleDecode}, OutputTokens: 9})
	prompt := Tokenize([]int{BOS}, "replay me please")
	pd := func(dec string, ids []int, max int, headers ...string) answer {
		body := func(kv string, stream bool) string {
			return `{"model":"m","prompt":` + jsonOf(ids) + `,"temperature":0,"max_tokens":` + fmt.Sprint(max) +
				`,"return_token_ids":true,"stream":` + fmt.Sprint(stream) + `,"kv_transfer_params":` + kv + `}`
		}
		status, _, b := post(t, pre.URL+"/v1/completions", body(nixlPrefillKV, false), "EPP-Profile: prefill")
		if status != 200 {
			t.Fatalf("prefill: %d %s", status, b)
		}
		return ask(t, dec, "/v1/completions", body(flipKV(t, b), true), append(headers, "EPP-Profile: decode")...)
	}
	whole := pd(d1.URL, prompt, 20)
	if whole.readErr != nil || len(whole.ids) != 9 || whole.finish != "stop" {
		t.Fatalf("unbroken: %+v", whole)
	}
	for _, k := range []int{1, 5, 8} {
		cut := pd(d1.URL, prompt, 20, FaultHeader+": decode:cut-after="+fmt.Sprint(k))
		if cut.readErr == nil || len(cut.ids) != k {
			t.Fatalf("k=%d: cut %+v", k, cut)
		}
		rest := pd(d2.URL, append(slices.Clone(prompt), cut.ids...), 20-k)
		if rest.readErr != nil || cut.text+rest.text != whole.text || !slices.Equal(append(cut.ids, rest.ids...), whole.ids) || rest.finish != "stop" {
			t.Errorf("k=%d: %q + %q, want %q", k, cut.text, rest.text, whole.text)
		}
	}
}
