// Package redisproc starts and stops a redis-server process on a free
// loopback port in a given directory (tests through redistest, and the
// async part of `celflow demo`). It imports nothing of celflow's.
package redisproc

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNotInstalled: redis-server is not on PATH.
var ErrNotInstalled = errors.New("redis-server is not on PATH (Debian/Ubuntu: apt-get install -y redis-server)")

// Server is one running redis-server.
type Server struct {
	Addr string // 127.0.0.1:port
	Dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited (and been reaped)

	bin  string
	port int
	opt  Options
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Options tune Launch.
type Options struct {
	AOF bool // appendonly yes, appendfsync always (a crash test)
	// Extra are more config directives, e.g. "notify-keyspace-events Kl".
	Extra []string
}

// Launch starts redis-server in dir (no RDB snapshots; AOF only when
// asked) on a free 127.0.0.1 port and waits until it answers PING.
func Launch(dir string, opt Options) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := start(bin, dir, port, opt)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
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
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, cmd: cmd, done: make(chan struct{}),
		bin: bin, port: port, opt: o}
	go func() { _ = cmd.Wait(); close(s.done) }()
	// Ready when it answers PING; bounded.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(s.Addr) {
			return s, nil
		}
		select {
		case <-s.done:
			deadline = time.Time{} // exited: give up now
		case <-time.After(20 * time.Millisecond):
		}
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

// Stop kills the server by PID (SIGKILL: a crash, as far as Redis knows)
// and reaps it. Safe to call twice.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart kills the server and starts it again on the same port and
// directory: with AOF, what was fsynced comes back.
func (s *Server) Restart() error {
	s.Stop()
	n, err := start(s.bin, s.Dir, s.port, s.opt)
	if err != nil {
		return err
	}
	s.cmd, s.done = n.cmd, n.done
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
