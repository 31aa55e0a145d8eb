package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// configFixtures holds the serve-config fixtures: invalid/*.yaml must be
// refused and valid/*.yaml accepted by every entry point. Relative to this
// package (the repository root is ../..).
const configFixtures = "../../cmd/internal/server/config/testdata"

// verdict is what one entry point made of a config: its exit code and the
// diagnostics text it printed.
type verdict struct {
	code int
	text string
}

// isolateEnv unsets every CELFLOW_* variable of the test's own
// environment for the rest of the test (restored after it), so that only
// the fixture's variables reach the three entry points.
func isolateEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "CELFLOW_") {
			t.Setenv(name, "") // registers the restore
			os.Unsetenv(name)
		}
	}
}

// fixtureEnv reads a fixture's `# env: NAME=value` lines: the CELFLOW_*
// environment all three entry points run under. The listener is always
// 127.0.0.1:0, and the stop does not wait out a drain delay, unless the
// fixture says otherwise.
func fixtureEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	env := map[string]string{"CELFLOW_SERVER_LISTEN": "127.0.0.1:0", "CELFLOW_SERVER_DRAIN_DELAY": "0s"}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "# env: "); ok {
			k, v, _ := strings.Cut(rest, "=")
			env[k] = v
		}
	}
	return env
}

// runValidateConfig is `celflow validate --config F`: what it prints on
// stdout.
func runValidateConfig(path string) verdict {
	var out, errb bytes.Buffer
	code := runValidate([]string{"--config", path}, &out, &errb)
	return verdict{code, out.String() + errb.String()}
}

// runServeCheck is `celflow serve --config F --check`: what it prints on
// stderr.
func runServeCheck(path string) verdict {
	var out bytes.Buffer
	code := runServe(context.Background(), []string{"--config", path, "--check"}, &out, os.Getenv, nil)
	return verdict{code, out.String()}
}

// runServeRefused is `celflow serve --config F` through the entry main
// uses (os.Getenv), bounded by a timeout: a config it starts on fails the
// test (the server is stopped).
func runServeRefused(t *testing.T, path string) verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logs := &syncBuf{}
	exit := make(chan int, 1)
	go func() {
		exit <- runServe(ctx, []string{"--config", path, "--log-format", "json"}, logs, os.Getenv, nil)
	}()
	for {
		select {
		case code := <-exit:
			return verdict{code, logs.String()}
		case <-time.After(10 * time.Millisecond):
			if strings.Contains(logs.String(), `"celflow is serving"`) {
				cancel()
				<-exit
				t.Fatalf("serve started on a config the checks refuse:\n%s", logs.String())
			}
		}
	}
}

// runServeAccepted starts `celflow serve --config F`, waits for readiness
// on 127.0.0.1, stops it and requires exit 0.
func runServeAccepted(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuf{}
	exit := make(chan int, 1)
	go func() {
		exit <- runServe(ctx, []string{"--config", path, "--log-format", "json"}, logs, os.Getenv, nil)
	}()
	addr := servingAddr(t, logs, exit)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("serve listens on %s, want 127.0.0.1", addr)
	}
	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("serve exited %d after a clean stop:\n%s", code, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// The CI gate and the rollout agree (the issue: validate --config and
// serve --check said "ok" to configs serve refused): every invalid fixture
// is refused by validate --config, serve --check and serve alike, all
// three printing the same diagnostics.
func TestConfigDifferentialInvalid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configFixtures, "invalid", "*.yaml"))
	if err != nil || len(files) < 9 {
		t.Fatalf("want the invalid fixtures in %s/invalid, found %d (%v)", configFixtures, len(files), err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			isolateEnv(t)
			for k, v := range fixtureEnv(t, f) {
				t.Setenv(k, v)
			}
			val, chk, srv := runValidateConfig(f), runServeCheck(f), runServeRefused(t, f)
			// validate exits 2 rather than 1 for an unreadable input (a
			// workflow file that is not there): a refusal all the same.
			unreadable := val.code == 2 && strings.Contains(val.text, "[input/unreadable]")
			if val.code != 1 && !unreadable || chk.code != 1 || srv.code != 1 {
				t.Fatalf("want every entry point to refuse (exit 1): validate %d, serve --check %d, serve %d\nvalidate:\n%s\nserve:\n%s",
					val.code, chk.code, srv.code, val.text, srv.text)
			}
			if val.text == "" || !strings.Contains(val.text, "error") && !strings.Contains(val.text, ": ") {
				t.Fatalf("no diagnostics:\n%s", val.text)
			}
			t.Logf("%s", val.text)
			if chk.text != val.text || srv.text != val.text {
				t.Fatalf("the diagnostics differ\nvalidate --config:\n%s\nserve --check:\n%s\nserve:\n%s", val.text, chk.text, srv.text)
			}
		})
	}
}

// Every valid fixture, the complete example of docs/configuration.md and
// an async config (workflows/epd-async.yaml) are accepted by all three:
// validate and --check say ok, and serve reaches readiness on 127.0.0.1.
func TestConfigDifferentialValid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configFixtures, "valid", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no valid fixtures in %s/valid (%v)", configFixtures, err)
	}
	files = append(files, docsExample(t), asyncExample(t))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if !strings.Contains(f, configFixtures) {
			name = filepath.Base(filepath.Dir(f)) + "/" + name
		}
		t.Run(name, func(t *testing.T) {
			isolateEnv(t)
			for k, v := range fixtureEnv(t, f) {
				t.Setenv(k, v)
			}
			val, chk := runValidateConfig(f), runServeCheck(f)
			if val.code != 0 || chk.code != 0 {
				t.Fatalf("want ok: validate %d, serve --check %d\nvalidate:\n%s\nserve --check:\n%s", val.code, chk.code, val.text, chk.text)
			}
			ok := f + ": ok ("
			if !strings.HasPrefix(val.text, ok) || !strings.Contains(chk.text, ok) {
				t.Fatalf("no ok line:\nvalidate:\n%s\nserve --check:\n%s", val.text, chk.text)
			}
			runServeAccepted(t, f)
		})
	}
}

// docsExample writes the complete example of docs/configuration.md, with
// the workflow it names, into a temporary directory.
func docsExample(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## A complete example\n\n```yaml\n")
	if !ok {
		t.Fatal("no complete example in docs/configuration.md")
	}
	dir := filepath.Join(t.TempDir(), "docs-example")
	copyWorkflow(t, "epd.yaml", filepath.Join(dir, "workflows"))
	return writeFile(t, dir, "serve.yaml", rest[:strings.Index(rest, "```")])
}

// asyncExample is a config with async on (Redis at a loopback port where
// nothing listens: nothing is sent before a request needs it) and the
// shipped async workflow.
func asyncExample(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "async-example")
	copyWorkflow(t, "epd-async.yaml", dir)
	return writeFile(t, dir, "serve.yaml", `upstream:
  gateway: "http://127.0.0.1:9"
  render: "http://127.0.0.1:9"
async:
  redis_url: "redis://127.0.0.1:1/0"
  dispatcher: {enabled: false}
workflow: epd-async.yaml
`)
}

func copyWorkflow(t *testing.T, name, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../../workflows", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, name, string(data))
}
