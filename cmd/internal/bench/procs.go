package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process of the benchmark: a worker, the bare proxy or
// celflow serve, all the same binary. Its stdout and stderr go to
// /dev/null: celflow writes a log line per request, and a pipe would make
// the bench process pay for reading it while it measures. When a child
// fails to start, the same command is run again with stderr captured, to
// say why.
type proc struct {
	name string
	url  string // http://127.0.0.1:port
	cmd  *exec.Cmd
	done chan struct{} // closed when the child has exited
}

// startProc runs bin with args, then waits (at most 15 s) until GET
// url+ready answers 200.
func startProc(ctx context.Context, name, bin, url, ready string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	p := &proc{name: name, url: url, cmd: cmd, done: make(chan struct{})}
	// The children die with the bench process, even on SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited at start: %s", name, diagnose(bin, args))
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		default:
		}
		if resp, err := c.Get(url + ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.CloseIdleConnections()
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s not ready after 15s: %s", name, diagnose(bin, args))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// diagnose runs a child that failed again for at most 3 s and returns the
// head of its stderr.
func diagnose(bin string, args []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	out := &capBuffer{max: 4 << 10}
	cmd.Stderr = out
	_ = cmd.Run()
	return fmt.Sprintf("`%s %s`: %s", bin, strings.Join(args, " "), out)
}

// stop sends SIGTERM, and SIGKILL if the child is still there after 5 s.
func (p *proc) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// alive reports whether the child is still running.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// cpuTime is the user+system CPU the process has used so far, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func (p *proc) cpuTime() (time.Duration, error) { return procCPU(p.cmd.Process.Pid) }

// clockTick is USER_HZ, 100 on every Linux the Go runtime supports.
const clockTick = 10 * time.Millisecond

func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime+stime from a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may hold spaces, so fields are
// counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no command field")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields", len(f)+2)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: bad utime/stime %q %q", f[11], f[12])
	}
	return time.Duration(u+s) * clockTick, nil
}

// freeAddr returns a 127.0.0.1 address that was free a moment ago. The
// children are given fixed ports (simpler than reading their logs); a race
// with another process taking the port shows as a start failure.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// capBuffer keeps the first max bytes written to it.
type capBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (c *capBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.TrimSpace(c.b.String())
}
