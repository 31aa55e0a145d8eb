// Package proctest runs the child processes of the .ci end-to-end tests
// (Jaeger, Prometheus): celflow, its simulated workers and the real
// servers they talk to, each on 127.0.0.1.
package proctest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one child process of an end-to-end test: its output is
// kept (bounded), it never outlives the test (Pdeathsig), and t.Cleanup
// stops it (SIGTERM, SIGKILL after 5 s) and logs its tail if t failed.
type Proc struct {
	name string
	cmd  *exec.Cmd

	mu    sync.Mutex
	lines []string // "out: " / "err: " prefixed
	grew  chan struct{}
	done  chan struct{}
}

// Start starts bin with args and the extra environment env.
func Start(t *testing.T, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(ChildEnv(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &Proc{name: name, cmd: cmd, grew: make(chan struct{}), done: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go p.collect(&wg, "out: ", stdout)
	go p.collect(&wg, "err: ", stderr)
	go func() {
		wg.Wait() // drain the pipes before Wait closes them
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("--- output of %s (last 40 lines):\n%s", name, p.Tail(40))
		}
	})
	return p
}

// ChildEnv is the test's environment without CELFLOW_* overrides (they
// would change the serve config the test writes), proxies, or OTEL_*
// settings of the caller: the test sets the tracing variables itself.
func ChildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CELFLOW_") || strings.HasPrefix(k, "OTEL_") ||
			strings.EqualFold(k, "http_proxy") || strings.EqualFold(k, "https_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (p *Proc) collect(wg *sync.WaitGroup, prefix string, r io.Reader) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, prefix+sc.Text())
		if len(p.lines) > 2000 {
			p.lines = p.lines[500:]
		}
		close(p.grew)
		p.grew = make(chan struct{})
		p.mu.Unlock()
	}
}

// WaitLine waits, at most within, for an output line matching re and
// returns its last submatch.
func (p *Proc) WaitLine(re *regexp.Regexp, within time.Duration) (string, error) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	seen := 0
	for {
		p.mu.Lock()
		lines, grew := p.lines[min(seen, len(p.lines)):], p.grew
		seen = len(p.lines)
		p.mu.Unlock()
		for _, l := range lines {
			if m := re.FindStringSubmatch(l); m != nil {
				return m[len(m)-1], nil
			}
		}
		select {
		case <-grew:
		case <-p.done:
			return "", fmt.Errorf("%s exited before printing %s:\n%s", p.name, re, p.Tail(20))
		case <-deadline.C:
			return "", fmt.Errorf("%s printed no line matching %s within %s", p.name, re, within)
		}
	}
}

// Tail is the last n lines of output, "out: " or "err: " prefixed.
func (p *Proc) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines[max(0, len(p.lines)-n):], "\n")
}

// Stop ends the process: SIGTERM, SIGKILL after 5 s.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
}
