//go:build e2e

package e2e

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

// proc is one child process of the suite. Its output is kept line by line;
// it is stopped (SIGTERM, then SIGKILL after 5 s) when the test ends, and
// its output is logged if the test failed.
type proc struct {
	name string
	cmd  *exec.Cmd

	mu    sync.Mutex
	lines []string // stdout and stderr, "out: " / "err: " prefixed
	grew  chan struct{}

	done     chan struct{}
	exitCode int
}

// startProc starts the celflow binary with args.
func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, exec.Command(bin, args...))
}

// startSimProc starts the celflow-sim binary with args.
func startSimProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, exec.Command(simBin, args...))
}

func startCmd(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	if cmd.Env == nil {
		cmd.Env = childEnv()
	}
	p := &proc{name: name, cmd: cmd, grew: make(chan struct{}), done: make(chan struct{})}
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
		wg.Wait() // the pipes must be drained before Wait
		err := cmd.Wait()
		p.exitCode = cmd.ProcessState.ExitCode()
		if err != nil && p.exitCode == 0 {
			p.exitCode = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(5 * time.Second)
		if t.Failed() {
			t.Logf("--- output of %s (last 60 lines):\n%s", name, p.tail(60))
		}
	})
	return p
}

// childEnv is the environment of children: the suite's, without CELFLOW_*
// overrides (they would change the configs the tests write) and without
// proxies (legs never use them anyway; media downloads neither).
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CELFLOW_") || strings.EqualFold(k, "http_proxy") || strings.EqualFold(k, "https_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (p *proc) collect(wg *sync.WaitGroup, prefix string, r io.Reader) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, prefix+sc.Text())
		if len(p.lines) > 5000 {
			p.lines = p.lines[1000:]
		}
		close(p.grew)
		p.grew = make(chan struct{})
		p.mu.Unlock()
	}
}

// waitLine waits for an output line matching re and returns its first
// submatch (or the whole match).
func (p *proc) waitLine(re *regexp.Regexp, within time.Duration) (string, error) {
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
			return "", fmt.Errorf("%s exited (code %d) before printing %s", p.name, p.exitCode, re)
		case <-deadline.C:
			return "", fmt.Errorf("%s printed no line matching %s within %s", p.name, re, within)
		}
	}
}

// output is everything the process printed so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines[max(0, len(p.lines)-n):], "\n")
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// wait waits for the exit; ok is false when it did not happen in time.
func (p *proc) wait(within time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.exitCode, true
	case <-time.After(within):
		return 0, false
	}
}

// stop ends the process: SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	p.signal(syscall.SIGTERM)
	if _, ok := p.wait(grace); !ok {
		_ = p.cmd.Process.Kill()
		p.wait(5 * time.Second)
	}
}
