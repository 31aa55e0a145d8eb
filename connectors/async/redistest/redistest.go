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
	"errors"
	"os"
	"testing"

	"github.com/celflow/celflow/connectors/async/redisproc"
)

// Server is one running redis-server.
type Server = redisproc.Server

// Options tune Start.
type Options = redisproc.Options

// Start starts a redis-server for t and registers its stop.
func Start(t testing.TB, o ...Options) *Server {
	t.Helper()
	var opt Options
	if len(o) > 0 {
		opt = o[0]
	}
	s, err := redisproc.Launch(t.TempDir(), opt)
	if errors.Is(err, redisproc.ErrNotInstalled) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is not on PATH (CI installs it: apt-get install -y redis-server)")
		}
		t.Skip("redis-server not on PATH: apt-get install -y redis-server to run this test")
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}
