// Package redistest starts a real redis-server for tests: on a free
// loopback port, in a t.TempDir(), without persistence unless asked, and
// stopped by PID when the test ends. It is the one place every async test
// (unit, HTTP contract, e2e) gets its Redis from.
//
// When redis-server is not on PATH the test is skipped with one line,
// except under CI=true, where a missing server is a failure: CI installs it
// (.ci/run) and must not silently skip what the feature promises.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	Addr string // 127.0.0.1:port
	Dir  string
	cmd  *exec.Cmd
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Options tune Start.
type Options struct {
	AOF bool // appendonly yes, appendfsync always (a crash test)
	// Extra are more config directives, e.g. "notify-keyspace-events Kl".
	Extra []string
}

// Start starts a redis-server for t and registers its stop.
func Start(t testing.TB, o ...Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is not on PATH (CI installs it: apt-get install -y redis-server)")
		}
		t.Skip("redis-server not on PATH: apt-get install -y redis-server to run this test")
	}
	var opt Options
	if len(o) > 0 {
		opt = o[0]
	}
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: free port: %v", err)
		}
		s, err := start(bin, dir, port, opt)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		if attempt == 4 {
			t.Fatalf("redistest: %v", err)
		}
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func start(bin, dir string, port int, o Options) (*Server, error) {
	conf := []string{
		"bind 127.0.0.1", "port " + strconv.Itoa(port), "dir " + dir, `save ""`,
		"protected-mode yes", "daemonize no", "logfile " + filepath.Join(dir, "redis.log"),
		"maxmemory-policy noeviction",
	}
	if o.AOF {
		conf = append(conf, "appendonly yes", "appendfsync always")
	} else {
		conf = append(conf, "appendonly no")
	}
	conf = append(conf, o.Extra...)
	cfgPath := filepath.Join(dir, fmt.Sprintf("redis-%d.conf", port))
	if err := os.WriteFile(cfgPath, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, cfgPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, cmd: cmd}
	// Ready when it answers PING; bounded.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(s.Addr) {
			return s, nil
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
	return nil, fmt.Errorf("redis-server on port %d did not start: %s", port, lastLine(string(log)))
}

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// Stop kills the server by PID and reaps it. Safe to call twice.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_, _ = s.cmd.Process.Wait()
	s.cmd = nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
