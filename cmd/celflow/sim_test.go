package main

import (
	"strings"
	"testing"

	"github.com/celflow/celflow/cmd/internal/sim"
)

// runSimAsync starts a simulator (celflow-sim's command line, args) in-process and returns the URL from
// its first stdout line; the returned func stops it and yields the exit code.
func runSimAsync(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	u, stop, err := sim.Start(args)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, "http://127.0.0.1:") && !strings.HasPrefix(u, "https://127.0.0.1:") {
		stop()
		t.Fatalf("listening on %s, not 127.0.0.1", u)
	}
	return u, stop
}
