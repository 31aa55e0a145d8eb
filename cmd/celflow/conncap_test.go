package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// server.max_connections reaches the running server's listener, and its
// refusals reach /metrics.
func TestServeMaxConnections(t *testing.T) {
	cfg := writeFile(t, t.TempDir(), "serve.yaml", `
server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 2s, max_connections: 2}
workflow:
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: decode-only}
  nodes:
    - id: decode
      type: decode
`)
	addr := serveAddr(t, cfg, map[string]string{"CELFLOW_UPSTREAM_GATEWAY": "http://127.0.0.1:1"})
	get := func(c net.Conn, path string) (string, error) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: celflow\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := get(c, "/healthz"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		_, err = get(c, "/healthz")
		c.Close()
		if err == nil {
			t.Fatal("a third connection was served with max_connections 2")
		}
	}
	m, err := get(conns[0], "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m, `celflow_connections_refused_total{reason="max_connections"} 1`) {
		t.Fatalf("metrics:\n%s", grepLines(m, "connections_refused"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
