package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// startWorker runs a worker on 127.0.0.1 for one test.
func startWorker(t *testing.T, cfg Config) (*Worker, *httptest.Server) {
	t.Helper()
	if cfg.SharedDir == "" {
		cfg.SharedDir = t.TempDir()
	}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	return w, srv
}

// post sends body to url with headers given as "Name: value" strings and
// returns the status, headers and body of the reply.
func post(t *testing.T, url, body string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading body: %v", url, err)
	}
	return resp.StatusCode, resp.Header, b
}

// decodeJSON unmarshals b into a generic value for shape assertions.
func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, b)
	}
	return m
}

// errorMessage returns the message of an OpenAI-style error reply.
func errorMessage(t *testing.T, b []byte) string {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI error: %s", b)
	}
	return e.Error.Message
}

// waitRecords polls rec until f accepts the page (bounded: 5 s).
func waitRecords(t *testing.T, rec *Recorder, f func(RecordsPage) bool) RecordsPage {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p := rec.Since(0)
		if f(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("records never matched: %+v", p.Records)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
