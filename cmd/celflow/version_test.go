package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The version the Makefile stamps (-X main.version=...) is what
// `celflow --version` and `celflow version` print, what SARIF names as the
// driver version and what celflow_build_info carries: the binary is built
// here with -X main.version=vTEST, as make build does, and run.
func TestVersionStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: not with -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "celflow")
	build := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-X main.version=vTEST", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	for _, arg := range []string{"--version", "version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil || !strings.HasPrefix(string(out), "celflow vTEST (go") {
			t.Errorf("celflow %s: %v, stdout %q", arg, err, out)
		}
	}

	out, err := exec.Command(bin, "validate", "--format", "sarif", "../../workflows/epd.yaml").Output()
	if err != nil {
		t.Fatalf("validate --format sarif: %v\n%s", err, out)
	}
	var sarif struct {
		Runs []struct {
			Tool struct {
				Driver struct{ Version string }
			}
		}
	}
	if err := json.Unmarshal(out, &sarif); err != nil || len(sarif.Runs) != 1 {
		t.Fatalf("sarif: %v, %d runs\n%s", err, len(sarif.Runs), out)
	}
	if v := sarif.Runs[0].Tool.Driver.Version; v != "vTEST" {
		t.Errorf("SARIF tool.driver.version = %q, want vTEST", v)
	}

	gw := gateway(t, "a")
	writeFile(t, dir, "wf.yaml", decodeOnly("one", "1"))
	cfg := writeFile(t, dir, "serve.yaml", serveConfig(gw.URL, listen))
	logs := &syncBuf{}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--log-format", "json")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill(); <-waited }()
	addr := listenAddr(t, logs, func() bool { return len(waited) > 0 })
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "celflow_build_info{") {
			info = append(info, sc.Text())
		}
	}
	if len(info) != 1 || !strings.Contains(info[0], `version="vTEST"`) || !strings.HasSuffix(info[0], " 1") {
		t.Errorf("celflow_build_info: %q, want one series with version=\"vTEST\"", info)
	}
}

// The usage lists version, not the tools, and names the tool binaries; a
// tool's old subcommand name says which binary it moved to.
func TestUsageAndMovedTools(t *testing.T) {
	var errb bytes.Buffer
	if code := run([]string{"--help"}, &errb); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	u := errb.String()
	for _, want := range []string{"  version ", "  serve ", "celflow-sim ", "celflow-bench ", "celflow-demo "} {
		if !strings.Contains(u, want) {
			t.Errorf("usage lacks %q:\n%s", want, u)
		}
	}
	for _, gone := range []string{"  sim  ", "  bench  ", "  demo  "} {
		if strings.Contains(u, gone) {
			t.Errorf("usage still lists %q:\n%s", gone, u)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--roles", "decode"}, "run `celflow-sim --roles decode`"},
		{[]string{"bench"}, "run `celflow-bench ...`"},
		{[]string{"demo", "--serve"}, "run `celflow-demo --serve`"},
	} {
		errb.Reset()
		if code := run(tc.args, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q (want %q)", tc.args, code, errb.String(), tc.want)
		}
	}
}
