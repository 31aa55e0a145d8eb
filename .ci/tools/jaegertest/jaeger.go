// Package jaegertest runs a real Jaeger v1.76 (in-memory store, everything
// on 127.0.0.1, free ports) for end-to-end tests, and reads traces back
// through its query API.
//
// The binary comes from $JAEGER_BIN, or from .ci/jaeger.sh, which builds
// and caches it. The config is .ci/jaeger-config.yaml, whose ports are set
// through the JAEGER_*_PORT variables.
package jaegertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options tune Start. Zero values pick the defaults.
type Options struct {
	Bin    string    // jaeger binary; default $JAEGER_BIN, else the path .ci/jaeger.sh prints
	Config string    // default .ci/jaeger-config.yaml
	Log    io.Writer // Jaeger's stdout and stderr; default discarded (kept in a 64 KiB tail)
	// Ready bounds the wait for the ports to answer; default 30s.
	Ready time.Duration
}

// Jaeger is one running Jaeger process.
type Jaeger struct {
	OTLPGRPC, OTLPHTTP, QueryHTTP, QueryGRPC int // the ports it listens on, all on 127.0.0.1

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	tail    *tailBuffer
	stop    sync.Once
}

// ciDir is the repository's .ci directory (this file is .ci/tools/jaegertest/jaeger.go).
func ciDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary returns $JAEGER_BIN, or runs .ci/jaeger.sh (building Jaeger into
// the cache on first use) and returns the path it prints.
func Binary(ctx context.Context) (string, error) {
	if b := os.Getenv("JAEGER_BIN"); b != "" {
		return b, nil
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(ciDir(), "jaeger.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("jaeger.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// freePorts reserves n distinct loopback ports. They are released before
// Jaeger binds them, so another process may take one in between; Start
// retries on a failed start.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Start launches Jaeger on free loopback ports and waits until its OTLP
// receivers accept connections and its query API answers. It tries three
// times (a reserved port may be taken before Jaeger binds it).
func Start(ctx context.Context, o Options) (*Jaeger, error) {
	if o.Bin == "" {
		b, err := Binary(ctx)
		if err != nil {
			return nil, err
		}
		o.Bin = b
	}
	if o.Config == "" {
		o.Config = filepath.Join(ciDir(), "jaeger-config.yaml")
	}
	if o.Ready <= 0 {
		o.Ready = 30 * time.Second
	}
	var err error
	for range 3 {
		var j *Jaeger
		if j, err = start(ctx, o); err == nil {
			return j, nil
		}
	}
	return nil, err
}

func start(ctx context.Context, o Options) (*Jaeger, error) {
	p, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	j := &Jaeger{OTLPGRPC: p[0], OTLPHTTP: p[1], QueryHTTP: p[2], QueryGRPC: p[3],
		exited: make(chan struct{}), tail: &tailBuffer{max: 64 << 10}}
	j.cmd = exec.Command(o.Bin, "--config", o.Config)
	j.cmd.Env = append(os.Environ(),
		"JAEGER_OTLP_GRPC_PORT="+strconv.Itoa(j.OTLPGRPC),
		"JAEGER_OTLP_HTTP_PORT="+strconv.Itoa(j.OTLPHTTP),
		"JAEGER_QUERY_HTTP_PORT="+strconv.Itoa(j.QueryHTTP),
		"JAEGER_QUERY_GRPC_PORT="+strconv.Itoa(j.QueryGRPC),
	)
	var out io.Writer = j.tail
	if o.Log != nil {
		out = io.MultiWriter(j.tail, o.Log)
	}
	j.cmd.Stdout, j.cmd.Stderr = out, out
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := j.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Bin, err)
	}
	go func() { j.waitErr = j.cmd.Wait(); close(j.exited) }()
	if err := j.waitReady(ctx, o.Ready); err != nil {
		_ = j.Stop()
		return nil, fmt.Errorf("%w\njaeger output:\n%s", err, j.tail.String())
	}
	return j, nil
}

// waitReady polls, at most for d, until both OTLP ports accept a
// connection and GET /api/services answers 200.
func (j *Jaeger) waitReady(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if j.ready(ctx) {
			return nil
		}
		select {
		case <-j.exited:
			return fmt.Errorf("jaeger exited before it was ready: %v", j.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("jaeger not ready after %s", d)
		case <-tick.C:
		}
	}
}

func (j *Jaeger) ready(ctx context.Context) bool {
	for _, p := range []int{j.OTLPGRPC, j.OTLPHTTP} {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL()+"/api/services", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// OTLPHTTPEndpoint is the OTLP/HTTP base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
func (j *Jaeger) OTLPHTTPEndpoint() string { return "http://127.0.0.1:" + strconv.Itoa(j.OTLPHTTP) }

// OTLPGRPCEndpoint is the OTLP/gRPC URL (with OTEL_EXPORTER_OTLP_PROTOCOL=grpc).
func (j *Jaeger) OTLPGRPCEndpoint() string { return "http://127.0.0.1:" + strconv.Itoa(j.OTLPGRPC) }

// QueryURL is the base of the UI and query API.
func (j *Jaeger) QueryURL() string { return "http://127.0.0.1:" + strconv.Itoa(j.QueryHTTP) }

// Output is the tail of Jaeger's logs, for a failing test's message.
func (j *Jaeger) Output() string { return j.tail.String() }

// Stop sends SIGTERM, waits up to 5s, then kills. Safe to call twice.
func (j *Jaeger) Stop() error {
	var err error
	j.stop.Do(func() {
		_ = j.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-j.exited:
		case <-time.After(5 * time.Second):
			_ = j.cmd.Process.Kill()
			<-j.exited
			err = errors.New("jaeger did not stop on SIGTERM within 5s; killed")
		}
	})
	return err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
