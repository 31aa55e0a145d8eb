package front

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/celflow/celflow/internal/tlsfiles"
	"github.com/celflow/celflow/internal/tlsfiles/tlstest"
)

// tlsSetup is a CA, a Secret-like volume holding a server certificate for
// 127.0.0.1, and the tlsfiles.Server reading it.
type tlsSetup struct {
	ca     *tlstest.CA
	secret *tlstest.Secret
	files  *tlsfiles.Server
	dir    string
}

func newTLSSetup(t *testing.T, cfg tlsfiles.ServerConfig) *tlsSetup {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	sec := tlstest.NewSecret(t, filepath.Join(dir), ca.Server(t, "127.0.0.1"))
	cfg.CertFile, cfg.KeyFile = sec.Files().Cert, sec.Files().Key
	s, err := tlsfiles.NewServer(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &tlsSetup{ca: ca, secret: sec, files: s, dir: dir}
}

// startTLS runs a server whose listener serves st's TLS.
func startTLS(t *testing.T, runner *fakeRunner, st *tlsSetup) *harness {
	t.Helper()
	h := start(t, runner, func(o *Options) { o.TLS = st.files.Config() })
	h.url = "https://" + h.addr
	return h
}

// client is an HTTPS client trusting st's CA; h2 negotiates HTTP/2.
func (st *tlsSetup) client(h2 bool, cert ...tls.Certificate) *http.Client {
	tr := &http.Transport{Proxy: nil, ForceAttemptHTTP2: h2,
		TLSClientConfig: &tls.Config{RootCAs: st.ca.Pool(), Certificates: cert}}
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

// TLS on the listener: HTTP/1.1 and HTTP/2 (ALPN) both work, and a stream
// still flows event by event over HTTP/2.
func TestTLSListenerProtocols(t *testing.T) {
	st := newTLSSetup(t, tlsfiles.ServerConfig{})
	sr := newStreamRunner()
	h := startTLS(t, &fakeRunner{serve: sr.serve}, st)
	for _, h2 := range []bool{false, true} {
		resp, err := st.client(h2).Get(h.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want || resp.TLS == nil {
			t.Fatalf("h2=%v: proto %s", h2, resp.Proto)
		}
	}
	// Plain HTTP on the TLS port is refused (net/http answers 400).
	if resp, err := testClient.Get("http://" + h.addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP on the TLS port: %d", resp.StatusCode)
		}
	}

	// The first event arrives before the runner is released: flushed.
	resp, err := st.client(true).Post(h.url+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("stream over %s", resp.Proto)
	}
	first := make([]byte, len("data: 1\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: 1\n\n" {
		t.Fatalf("first event %q %v", first, err)
	}
	close(sr.release)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "data: 2\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

// mTLS at the HTTP level: no certificate, no request; a CA-signed one, 200.
func TestTLSListenerMTLS(t *testing.T) {
	dir := t.TempDir()
	clientCA := tlstest.NewCA(t, "clients")
	tlstest.WriteFile(t, filepath.Join(dir, "clients.pem"), clientCA.PEM)
	st := newTLSSetup(t, tlsfiles.ServerConfig{ClientCAFile: filepath.Join(dir, "clients.pem")})
	h := startTLS(t, nil, st)
	if resp, err := st.client(false).Get(h.url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("a client without a certificate was served")
	} else if !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("err = %v", err)
	}
	resp, err := st.client(true, clientCA.Client(t, "app").TLS(t)).Get(h.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(resp.TLS.PeerCertificates) == 0 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// Rotation under load: 4 clients × 300 requests on keep-alive connections
// while the certificate is replaced twice (an atomic Secret swap, picked
// up by the file poll). No request fails; a new connection after each
// swap sees the new serial; kept-alive connections keep working. A broken
// replacement afterwards keeps the last good certificate.
func TestTLSRotationUnderLoad(t *testing.T) {
	st := newTLSSetup(t, tlsfiles.ServerConfig{})
	h := startTLS(t, nil, st)
	ctx, stopWatch := context.WithCancel(context.Background())
	var reloads, failures atomic.Int32
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tlsfiles.Watch(ctx, 5*time.Millisecond, func() {
			switch err := st.files.Reload(); {
			case err == nil:
				reloads.Add(1)
			case !errors.Is(err, tlsfiles.ErrUnchanged):
				failures.Add(1)
			}
		})
	}()
	defer func() { stopWatch(); <-watched }()

	serialOnNewConn := func() string {
		t.Helper()
		c := st.client(false)
		defer c.CloseIdleConnections()
		resp, err := c.Get(h.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}

	const clients, perClient = 4, 300
	var done atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := st.client(i%2 == 1) // two on HTTP/1.1, two on HTTP/2
			defer c.CloseIdleConnections()
			for j := range perClient {
				resp, err := c.Post(h.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi"}`))
				if err != nil {
					errs <- fmt.Errorf("client %d request %d: %w", i, j, err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("client %d request %d: status %d", i, j, resp.StatusCode)
				}
				done.Add(1)
			}
		}()
	}

	serials := []string{serialOnNewConn()}
	for rot := 1; rot <= 2; rot++ {
		// Rotate once the load is well under way (a third, then two thirds).
		waitFor(t, "load progress", func() bool { return done.Load() >= int32(rot*clients*perClient/3) })
		next := st.ca.Server(t, "127.0.0.1")
		st.secret.Update(t, next)
		want := next.Cert.SerialNumber.String()
		waitFor(t, "the rotated certificate", func() bool { return st.files.Leaf().SerialNumber.String() == want })
		if got := serialOnNewConn(); got != want {
			t.Fatalf("rotation %d: a new connection sees serial %s, want %s", rot, got, want)
		}
		serials = append(serials, want)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := h.runner.calls(); n != clients*perClient {
		t.Fatalf("runner served %d requests, want %d", n, clients*perClient)
	}
	if reloads.Load() != 2 || failures.Load() != 0 {
		t.Fatalf("reloads %d failures %d, want 2 and 0", reloads.Load(), failures.Load())
	}

	// A broken replacement: the last good certificate keeps serving.
	st.secret.Update(t, &tlstest.Leaf{CertPEM: []byte("-----BEGIN CERTIFICATE-----\nbroken\n"), KeyPEM: []byte("x")})
	waitFor(t, "the broken set to be seen", func() bool { return failures.Load() >= 1 })
	t.Logf("failures %d", failures.Load())
	if got := serialOnNewConn(); got != serials[2] {
		t.Fatalf("after a broken replacement: serial %s, want %s", got, serials[2])
	}
}

// A separate metrics listener serves /metrics alone; the main listener
// then answers 404 there.
func TestMetricsListener(t *testing.T) {
	mln := listen(t)
	h := start(t, nil, func(o *Options) {
		o.MetricsListener = mln
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "celflow_up 1\n") })
	})
	murl := "http://" + mln.Addr().String()
	resp, body := h.do(t, "GET", "/metrics", "", nil)
	if resp.StatusCode != 404 {
		t.Fatalf("main listener /metrics = %d", resp.StatusCode)
	}
	if _, _, code := errorReply(t, resp, body); code != "not_found" {
		t.Fatal(code)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/metrics", 200, "celflow_up 1\n"},
		{"POST", "/metrics", 405, ""},
		{"GET", "/healthz", 404, ""},
		{"GET", "/v1/models", 404, ""},
	} {
		req, _ := http.NewRequest(tc.method, murl+tc.path, nil)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.body != "" && string(b) != tc.body) || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s = %d %q", tc.method, tc.path, resp.StatusCode, b)
		}
	}
	// Scrapes go on during the drain; the listener closes with the server.
	h.srv.draining.Store(true)
	if resp, err := testClient.Get(murl + "/metrics"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape while draining: %v", err)
	} else {
		resp.Body.Close()
	}
	h.srv.draining.Store(false)
	h.shutdown(t)
	testClient.CloseIdleConnections()
	if resp, err := testClient.Get(murl + "/metrics"); err == nil {
		resp.Body.Close()
		t.Fatal("metrics listener still open after the shutdown")
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
