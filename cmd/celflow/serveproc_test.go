package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/cmd/internal/sim"
)

// decodeSim is a `celflow sim` decode worker on 127.0.0.1 for the test.
func decodeSim(t *testing.T) *httptest.Server {
	t.Helper()
	w, err := sim.NewWorker(sim.Config{Roles: []sim.Role{sim.RoleDecode}, SharedDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(w)
	t.Cleanup(s.Close)
	return s
}

// startServe runs `celflow serve --config cfg` in process for the rest of
// the test, with env as its CELFLOW_* environment (nil: none); the test's
// end stops it and requires exit 0. It returns the listen address and the
// JSON log.
func startServe(t *testing.T, cfg string, env map[string]string) (string, *syncBuf) {
	t.Helper()
	return startServeHUP(t, cfg, func(k string) string { return env[k] }, nil)
}

// startServeHUP is startServe with getenv as the environment and hup as the
// SIGHUP channel (nil: none) the test sends reloads on.
func startServeHUP(t *testing.T, cfg string, getenv func(string) string, hup chan os.Signal) (string, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() { exit <- runServe(ctx, []string{"--config", cfg, "--log-format", "json"}, logs, getenv, hup) }()
	addr := servingAddr(t, logs, exit)
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exit:
			if code != 0 {
				t.Errorf("serve exited %d: %s", code, logs.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop")
		}
	})
	return addr, logs
}

// servingAddr waits for the "celflow is serving" line.
func servingAddr(t *testing.T, logs *syncBuf, exit chan int) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		select {
		case code := <-exit:
			t.Fatalf("serve exited %d: %s", code, logs.String())
		default:
		}
		for _, ln := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(ln), &m) == nil && m["msg"] == "celflow is serving" {
				if a, _ := m["listen"].(string); a != "" {
					return a
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("never listened: %s", logs.String())
	return ""
}
