package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/cmd/internal/sim"
)

// runSimAsync starts a simulator (celflow-sim's command line, args) in-process and returns the URL from
// its first stdout line; the returned func stops it and yields the exit code.
func runSimAsync(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- sim.Main(ctx, args, pw, &stderr)
		pw.Close()
	}()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		lines <- line
		io.Copy(io.Discard, pr)
	}()
	select {
	case line := <-lines:
		u, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
		if !ok || !strings.HasPrefix(u, "http://127.0.0.1:") && !strings.HasPrefix(u, "https://127.0.0.1:") {
			cancel()
			t.Fatalf("first line %q (stderr %q)", line, stderr.String())
		}
		return u, func() int { cancel(); return <-code }
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("no listening line within 10s")
	}
	return "", nil
}
