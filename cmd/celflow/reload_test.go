package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gateway answers every leg with {"gw":"<name>"}.
func gateway(t *testing.T, name string) *httptest.Server {
	t.Helper()
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"gw":"`+name+`"}`)
	}))
	t.Cleanup(gw.Close)
	return gw
}

// decodeOnly is a one-node workflow; its name labels the request metrics.
func decodeOnly(name, version string) string {
	return "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: " + name + ", version: \"" + version +
		"\"}\nnodes:\n  - id: decode\n    type: decode\n"
}

// serveConfig is a serve config on gw with the workflow in wf.yaml; extra
// adds server keys.
func serveConfig(gw, extra string) string {
	return "server: {drain_delay: 0s, shutdown_timeout: 2s" + extra + "}\n" +
		"upstream: {gateway: \"" + gw + "\"}\nworkflow: wf.yaml\n"
}

// logLines decodes the JSON log lines whose msg contains msg.
func logLines(logs string, msg string) []map[string]any {
	var out []map[string]any
	for _, ln := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(ln), &m) == nil {
			if s, _ := m["msg"].(string); strings.Contains(s, msg) {
				out = append(out, m)
			}
		}
	}
	return out
}

// listenAddr waits (5 s at most) for the "celflow is serving" line.
func listenAddr(t *testing.T, logs *syncBuf, exited func() bool) string {
	t.Helper()
	for i := 0; i < 500; i++ {
		if ls := logLines(logs.String(), "celflow is serving"); len(ls) > 0 {
			addr, _ := ls[0]["listen"].(string)
			return addr
		}
		if exited() {
			t.Fatalf("serve exited: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("never listened: %s", logs.String())
	return ""
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}

// chat sends one chat request and returns the status and body.
func chat(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric scrapes one series (`name{labels}` exactly as exposed); -1 when absent.
func metric(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return -1
}

// waitMetric polls (5 s at most) until the series has the value.
func waitMetric(t *testing.T, addr, series string, want float64, logs *syncBuf) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if metric(t, addr, series) == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never reached %v (now %v); log:\n%s", series, want, metric(t, addr, series), logs.String())
}

const (
	listen      = `, listen: "127.0.0.1:0"`
	reloadsOK   = `celflow_config_reloads_total{result="success"}`
	reloadsFail = `celflow_config_reloads_total{result="failure"}`
)

func requests(workflow string) string {
	return `celflow_requests_total{code="200",route="/v1/chat/completions",workflow="` + workflow + `"}`
}

// A reload in process (the signal channel fed directly): a good edit swaps
// upstream, workflow and body cap and warns about a restart-only key; each bad edit
// (workflow, config, upstream) keeps the old ones serving, logs the
// diagnostics validate prints, and counts a failure.
func TestServeReload(t *testing.T) {
	gwA, gwB := gateway(t, "a"), gateway(t, "b")
	dir := t.TempDir()
	wfPath := writeFile(t, dir, "wf.yaml", decodeOnly("one", "1"))
	cfgPath := writeFile(t, dir, "serve.yaml", serveConfig(gwA.URL, listen))

	hup := make(chan os.Signal, 1)
	addr, logs := startServeHUP(t, cfgPath, noEnv, hup)
	if code, body := chat(t, addr); code != 200 || body != `{"gw":"a"}` {
		t.Fatalf("before: %d %s", code, body)
	}

	// A good edit: new workflow, new gateway, and a listen address that
	// cannot change without a restart.
	writeFile(t, dir, "wf.yaml", decodeOnly("two", "2"))
	writeFile(t, dir, "serve.yaml", serveConfig(gwB.URL, `, max_request_body_size: 1, listen: "127.0.0.1:1"`))
	hup <- syscall.SIGHUP
	waitMetric(t, addr, reloadsOK, 1, logs)
	if code, body := chat(t, addr); code != 200 || body != `{"gw":"b"}` {
		t.Fatalf("after the reload: %d %s", code, body)
	}
	// The body cap is hot: 1 MiB now.
	resp, err := client.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"pad":"`+strings.Repeat("x", 3<<19)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("1.5 MiB body after the cap went to 1 MiB: %d", resp.StatusCode)
	}
	if metric(t, addr, requests("two")) != 1 || metric(t, addr, requests("one")) != 1 {
		t.Errorf("requests by workflow: one %v, two %v", metric(t, addr, requests("one")), metric(t, addr, requests("two")))
	}
	if ls := logLines(logs.String(), "config reloaded"); len(ls) != 1 || ls[0]["workflow"] != "two" ||
		ls[0]["version"] != "2" || ls[0]["hash"] == "" || ls[0]["level"] != "info" || ls[0]["upstream_replaced"] != true {
		t.Errorf("reloaded line: %v", ls)
	}
	if ls := logLines(logs.String(), "needs a restart"); len(ls) != 1 || ls[0]["key"] != "server.listen" ||
		ls[0]["configured"] != "127.0.0.1:1" || ls[0]["running"] != "127.0.0.1:0" || ls[0]["level"] != "warning" {
		t.Errorf("restart warning: %v", ls)
	}

	bad := []struct {
		name, file, text string
		diag             string // a diagnostic that must be logged, "" = what validate prints for wf.yaml
	}{
		{"workflow", "wf.yaml", decodeOnly("three", "3") + "pipline: 1\n", ""},
		{"config", "serve.yaml", serveConfig(gwB.URL, listen+", lisen: x"), cfgPath + ":1:"},
		{"upstream", "serve.yaml", serveConfig("ftp://gw", listen), cfgPath + ":2:"},
	}
	for i, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, dir, "wf.yaml", decodeOnly("two", "2"))
			writeFile(t, dir, "serve.yaml", serveConfig(gwB.URL, listen))
			writeFile(t, dir, tc.file, tc.text)
			want := tc.diag
			if want == "" {
				var vout bytes.Buffer
				if runValidate([]string{"--no-tests", wfPath}, &vout, io.Discard) != 1 {
					t.Fatal("validate accepts the bad workflow")
				}
				// The log line is the diagnostic's first line (validate adds the source and a caret).
				want, _, _ = strings.Cut(vout.String(), "\n")
			}
			hup <- syscall.SIGHUP
			waitMetric(t, addr, reloadsFail, float64(i+1), logs)
			found := false
			for _, l := range logLines(logs.String(), "config reload: invalid") {
				d, _ := l["diagnostic"].(string)
				found = found || l["level"] == "error" && strings.HasPrefix(d, want)
			}
			if !found {
				t.Errorf("no error line with diagnostic %q:\n%s", want, logs.String())
			}
			if code, body := chat(t, addr); code != 200 || body != `{"gw":"b"}` {
				t.Fatalf("after a failed reload: %d %s", code, body)
			}
		})
	}
	if metric(t, addr, requests("two")) != 1+float64(len(bad)) || metric(t, addr, reloadsOK) != 1 {
		t.Errorf("the old workflow did not keep serving: two %v, reloads ok %v",
			metric(t, addr, requests("two")), metric(t, addr, reloadsOK))
	}
}

// TestServeHelperProcess is celflow itself when run by TestServeReloadSIGHUP
// (the test binary links every command): not a test on its own.
func TestServeHelperProcess(t *testing.T) {
	if os.Getenv("CELFLOW_TEST_HELPER") != "1" {
		t.Skip("helper process for TestServeReloadSIGHUP")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(run(args, os.Stderr))
}

// celflowCmd runs celflow: CELFLOW_BIN when set, else this test binary as
// TestServeHelperProcess (no build needed).
func celflowCmd(t *testing.T, args ...string) *exec.Cmd {
	if bin := os.Getenv("CELFLOW_BIN"); bin != "" {
		return exec.Command(bin, args...)
	}
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestServeHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "CELFLOW_TEST_HELPER=1")
	return cmd
}

// celflow serve as a process: a real SIGHUP swaps the workflow and the
// gateway, an invalid edit then keeps them serving, and SIGTERM still
// drains to exit 0.
func TestServeReloadSIGHUP(t *testing.T) {
	gwA, gwB := gateway(t, "a"), gateway(t, "b")
	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", decodeOnly("one", "1"))
	cfgPath := writeFile(t, dir, "serve.yaml", serveConfig(gwA.URL, listen))

	logs := &syncBuf{}
	cmd := celflowCmd(t, "serve", "--config", cfgPath, "--log-format", "json")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-waited
		}
	})
	addr := listenAddr(t, logs, func() bool { return len(waited) > 0 })
	if code, body := chat(t, addr); code != 200 || body != `{"gw":"a"}` {
		t.Fatalf("before: %d %s", code, body)
	}

	writeFile(t, dir, "wf.yaml", decodeOnly("two", "2"))
	writeFile(t, dir, "serve.yaml", serveConfig(gwB.URL, listen))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, addr, reloadsOK, 1, logs)
	if code, body := chat(t, addr); code != 200 || body != `{"gw":"b"}` || metric(t, addr, requests("two")) != 1 {
		t.Fatalf("after the reload: %d %s; log:\n%s", code, body, logs.String())
	}

	writeFile(t, dir, "wf.yaml", "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: three}\nnodes: []\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, addr, reloadsFail, 1, logs)
	if code, body := chat(t, addr); code != 200 || body != `{"gw":"b"}` || metric(t, addr, requests("two")) != 2 {
		t.Fatalf("after a failed reload: %d %s", code, body)
	}
	if len(logLines(logs.String(), "config reload failed")) != 1 {
		t.Errorf("no failure line:\n%s", logs.String())
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("exit: %v; log:\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}
