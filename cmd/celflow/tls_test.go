package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/celflow/celflow/internal/tlsfiles/tlstest"
)

// TLS on every hop, in process: a client → celflow over HTTPS (HTTP/2),
// celflow → an https `celflow sim` worker that requires celflow's client
// certificate, verified with upstream.tls.ca_file. /metrics lives on its
// own listener. SIGHUP reloads a rotated certificate; a broken one is
// counted and the old one serves on.
func TestServeTLSEveryHop(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	caFile := writeFile(t, dir, "ca.pem", string(ca.PEM))
	worker := ca.Server(t, "127.0.0.1").Write(t, dir, "worker")
	ca.Client(t, "celflow").Write(t, dir, "celflow-client")
	sec := tlstest.NewSecret(t, filepath.Join(dir), ca.Server(t, "127.0.0.1"))

	wURL, stopW := runSimAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode", "--model", "tls-model",
		"--tls-cert", worker.Cert, "--tls-key", worker.Key, "--tls-client-ca", caFile)
	defer stopW()
	if !strings.HasPrefix(wURL, "https://") {
		t.Fatalf("sim URL %s", wURL)
	}
	writeFile(t, dir, "wf.yaml", decodeOnly("tls", "1"))
	cfg := `server:
  listen: "127.0.0.1:0"
  drain_delay: 0s
  shutdown_timeout: 2s
  metrics_listen: "127.0.0.1:0"
  tls: {cert_file: tls.crt, key_file: tls.key, reload_interval: 0s}
upstream:
  pools: {decode: ["` + wURL + `"]}
  tls: {ca_file: ca.pem, cert_file: celflow-client.crt, key_file: celflow-client.key}
workflow: wf.yaml
`
	cfgPath := writeFile(t, dir, "serve.yaml", cfg)

	logs := &syncBuf{}
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() { exit <- runServe(ctx, []string{"--config", cfgPath, "--log-format", "json"}, logs, noEnv, hup) }()
	defer func() {
		cancel()
		if code := <-exit; code != 0 {
			t.Errorf("exit %d", code)
		}
	}()
	addr := listenAddr(t, logs, func() bool { return len(exit) > 0 })
	var maddr string
	if ls := logLines(logs.String(), "serving /metrics on its own listener"); len(ls) == 1 {
		maddr, _ = ls[0]["metrics_listen"].(string)
	} else {
		t.Fatalf("no metrics listener line:\n%s", logs.String())
	}

	https := func() *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		c := https()
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	// The workflow's decode leg crosses two TLS hops.
	c := https()
	resp, err := c.Post("https://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || !strings.Contains(string(body), `"text_completion"`) {
		t.Fatalf("completion over TLS: %d %s %s\n%s", resp.StatusCode, resp.Proto, body, logs.String())
	}
	if resp, b := get("/v1/models"); resp.StatusCode != 200 || !strings.Contains(b, `"id":"tls-model"`) {
		t.Fatalf("/v1/models: %d %s", resp.StatusCode, b)
	}
	if resp, _ := get("/metrics"); resp.StatusCode != 404 {
		t.Fatalf("/metrics on the main listener: %d", resp.StatusCode)
	}
	if resp, _ := get("/health"); resp.StatusCode != 200 {
		t.Fatalf("/health: %d", resp.StatusCode)
	}
	const ok, bad = `celflow_tls_reloads_total{result="success",scope="server"}`, `celflow_tls_reloads_total{result="failure",scope="server"}`
	if metric(t, maddr, ok) != 0 || metric(t, maddr, `celflow_tls_certificate_expiry_timestamp_seconds{scope="upstream"}`) <= 0 {
		t.Fatal("TLS series missing on the metrics listener")
	}

	// Rotation on SIGHUP: new connections see the new serial, the kept
	// connection c still works.
	next := ca.Server(t, "127.0.0.1")
	sec.Update(t, next)
	hup <- syscall.SIGHUP
	waitMetric(t, maddr, ok, 1, logs)
	if resp, _ := get("/healthz"); resp.TLS.PeerCertificates[0].SerialNumber.Cmp(next.Cert.SerialNumber) != 0 {
		t.Fatal("a new connection does not see the rotated certificate")
	}
	if resp, err := c.Get("https://" + addr + "/healthz"); err != nil {
		t.Fatalf("kept connection: %v", err)
	} else {
		resp.Body.Close()
	}

	// A broken replacement: counted, logged, the rotated certificate serves on.
	otherKey, err := os.ReadFile(worker.Key)
	if err != nil {
		t.Fatal(err)
	}
	sec.Update(t, &tlstest.Leaf{CertPEM: next.CertPEM, KeyPEM: otherKey})
	hup <- syscall.SIGHUP
	waitMetric(t, maddr, bad, 1, logs)
	if resp, _ := get("/healthz"); resp.TLS.PeerCertificates[0].SerialNumber.Cmp(next.Cert.SerialNumber) != 0 {
		t.Fatal("a broken replacement changed the served certificate")
	}
	if ls := logLines(logs.String(), "TLS reload failed"); len(ls) != 1 || ls[0]["level"] != "error" {
		t.Fatalf("failure line: %v", ls)
	}
}

// self_signed serves a generated certificate whose fingerprint is logged;
// a certificate file that does not load refuses the start.
func TestServeSelfSignedAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "wf.yaml", decodeOnly("tls", "1"))
	cfgPath := writeFile(t, dir, "serve.yaml", serveConfig("http://127.0.0.1:9", listen))
	env := func(k string) string {
		if k == "CELFLOW_SERVER_TLS_SELF_SIGNED" {
			return "true"
		}
		return ""
	}
	logs := &syncBuf{}
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() { exit <- runServe(ctx, []string{"--config", cfgPath, "--log-format", "json"}, logs, env, nil) }()
	addr := listenAddr(t, logs, func() bool { return len(exit) > 0 })
	ls := logLines(logs.String(), "self-signed certificate")
	if len(ls) != 1 || ls[0]["level"] != "warning" {
		t.Fatalf("self-signed line: %v", ls)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if sum := sha256.Sum256(leaf.Raw); hex.EncodeToString(sum[:]) != ls[0]["sha256"] {
		t.Fatal("the logged fingerprint is not the served certificate's")
	}
	cancel()
	<-exit

	writeFile(t, dir, "bad.crt", "not a certificate")
	cfgPath = writeFile(t, dir, "serve.yaml", "server: {tls: {cert_file: bad.crt, key_file: bad.crt}}\nupstream: {gateway: \"http://127.0.0.1:9\"}\nworkflow: wf.yaml\n")
	var stderr syncBuf
	if code := runServe(context.Background(), []string{"--config", cfgPath}, &stderr, noEnv, nil); code != 1 ||
		!strings.Contains(stderr.String(), "serve.yaml:1:15: server.tls: ") { // at the key, as validate prints it
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}
