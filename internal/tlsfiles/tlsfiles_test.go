package tlsfiles_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/internal/tlsfiles"
	"github.com/celflow/celflow/internal/tlsfiles/tlstest"
)

// serve accepts TLS connections on 127.0.0.1 with conf, completing each
// handshake and writing one byte, until the test ends.
func serve(t *testing.T, conf *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if tc := c.(*tls.Conn); tc.Handshake() == nil {
					_, _ = c.Write([]byte{1})
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial handshakes with addr and returns the server's leaf serial, or the error.
func dial(addr string, conf *tls.Config) (string, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, conf)
	if err != nil {
		return "", err
	}
	defer c.Close()
	// TLS 1.3 reports a refused client certificate after the handshake:
	// read the server's byte to see it.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 1 {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestServerHandshakes(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	clientCA := tlstest.NewCA(t, "client CA")
	srvFiles := ca.Server(t, "127.0.0.1", "localhost").Write(t, dir, "server")
	tlstest.WriteFile(t, filepath.Join(dir, "clients.pem"), clientCA.PEM)
	good := clientCA.Client(t, "good").TLS(t)
	stranger := tlstest.NewCA(t, "other").Client(t, "stranger").TLS(t)

	base := tlsfiles.ServerConfig{CertFile: srvFiles.Cert, KeyFile: srvFiles.Key}
	mtls := base
	mtls.ClientCAFile = filepath.Join(dir, "clients.pem")
	optional := mtls
	optional.ClientAuth = "optional"
	tls13 := base
	tls13.MinVersion = "1.3"

	for _, tc := range []struct {
		name   string
		cfg    tlsfiles.ServerConfig
		client *tls.Config
		err    string // "" = handshake succeeds
	}{
		{"plain handshake", base, &tls.Config{}, ""},
		{"floor 1.2 refuses TLS 1.1", base, &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, "protocol version"},
		{"floor 1.2 accepts TLS 1.2", base, &tls.Config{MaxVersion: tls.VersionTLS12}, ""},
		{"floor 1.3 refuses TLS 1.2", tls13, &tls.Config{MaxVersion: tls.VersionTLS12}, "protocol version"},
		{"mTLS refuses no certificate", mtls, &tls.Config{}, "certificate required"},
		{"mTLS refuses no certificate (TLS 1.2)", mtls, &tls.Config{MaxVersion: tls.VersionTLS12}, "handshake failure"},
		{"mTLS refuses a stranger", mtls, &tls.Config{GetClientCertificate: send(stranger)}, "unknown certificate authority"},
		{"mTLS accepts a client certificate", mtls, &tls.Config{Certificates: []tls.Certificate{good}}, ""},
		{"optional accepts no certificate", optional, &tls.Config{}, ""},
		{"optional refuses a stranger", optional, &tls.Config{GetClientCertificate: send(stranger)}, "unknown certificate authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tlsfiles.NewServer(tc.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, s.Config())
			tc.client.RootCAs = ca.Pool()
			tc.client.ServerName = "127.0.0.1"
			_, err = dial(addr, tc.client)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("handshake: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// A changed pair serves new handshakes; an unchanged set is ErrUnchanged; a
// broken replacement keeps the old pair and is reported once.
func TestServerReload(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first := ca.Server(t, "127.0.0.1")
	sec := tlstest.NewSecret(t, dir, first)
	f := sec.Files()
	s, err := tlsfiles.NewServer(tlsfiles.ServerConfig{CertFile: f.Cert, KeyFile: f.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config())
	client := &tls.Config{RootCAs: ca.Pool()}
	want := func(serial string) {
		t.Helper()
		got, err := dial(addr, client)
		if err != nil || got != serial {
			t.Fatalf("serial = %s, %v; want %s", got, err, serial)
		}
	}
	want(first.Cert.SerialNumber.String())
	if err := s.Reload(); !errors.Is(err, tlsfiles.ErrUnchanged) {
		t.Fatalf("reload of unchanged files = %v", err)
	}

	second := ca.Server(t, "127.0.0.1")
	sec.Update(t, second)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	want(second.Cert.SerialNumber.String())

	// A key that does not match the certificate.
	third := ca.Server(t, "127.0.0.1")
	sec.Update(t, &tlstest.Leaf{CertPEM: third.CertPEM, KeyPEM: first.KeyPEM})
	if err := s.Reload(); err == nil || errors.Is(err, tlsfiles.ErrUnchanged) {
		t.Fatalf("broken pair: err = %v", err)
	}
	if err := s.Reload(); !errors.Is(err, tlsfiles.ErrUnchanged) {
		t.Fatalf("same broken pair again = %v, want ErrUnchanged", err)
	}
	want(second.Cert.SerialNumber.String())
	// Garbage, then a missing file.
	sec.Update(t, &tlstest.Leaf{CertPEM: []byte("not PEM"), KeyPEM: []byte("x")})
	if err := s.Reload(); err == nil {
		t.Fatal("garbage loaded")
	}
	if err := os.Remove(f.Cert); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("missing file loaded")
	}
	want(second.Cert.SerialNumber.String())
	if s.Leaf().SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatal("Leaf is not the serving certificate")
	}
}

func TestServerUpdateAndSelfSigned(t *testing.T) {
	s, err := tlsfiles.NewServer(tlsfiles.ServerConfig{SelfSigned: true}, []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	leaf := s.Leaf()
	if len(leaf.IPAddresses) != 1 || len(leaf.DNSNames) != 1 || len(tlsfiles.Fingerprint(leaf)) != 64 {
		t.Fatalf("self-signed leaf: %v %v", leaf.IPAddresses, leaf.DNSNames)
	}
	addr := serve(t, s.Config())
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	if _, err := dial(addr, &tls.Config{RootCAs: roots, ServerName: "localhost"}); err != nil {
		t.Fatalf("self-signed handshake: %v", err)
	}
	// Raising the floor applies to the next handshake; the certificate stays.
	if err := s.Update(tlsfiles.ServerConfig{SelfSigned: true, MinVersion: "1.3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(addr, &tls.Config{RootCAs: roots, ServerName: "localhost", MaxVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("TLS 1.2 accepted after the floor moved to 1.3")
	}
	if s.Leaf() != leaf {
		t.Fatal("the self-signed certificate changed on update")
	}
	for _, bad := range []tlsfiles.ServerConfig{{}, {SelfSigned: true, ClientAuth: "require"}} {
		if err := s.Update(bad); err == nil {
			t.Errorf("Update(%+v) accepted", bad)
		}
	}
}

func TestServerConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		cfg  tlsfiles.ServerConfig
		want string
	}{
		{tlsfiles.ServerConfig{CertFile: "c"}, "cert_file: cert_file and key_file go together"},
		{tlsfiles.ServerConfig{CertFile: "c", KeyFile: "k", SelfSigned: true}, "self_signed:"},
		{tlsfiles.ServerConfig{SelfSigned: true, MinVersion: "1.1"}, "min_version:"},
		{tlsfiles.ServerConfig{SelfSigned: true, ClientAuth: "require"}, "client_auth: \"require\" needs client_ca_file"},
		{tlsfiles.ServerConfig{SelfSigned: true, ClientAuth: "maybe", ClientCAFile: "x"}, "client_auth: want"},
		{tlsfiles.ServerConfig{ClientCAFile: "x"}, "client_ca_file: client certificates need TLS"},
	} {
		err := errors.Join(tc.cfg.Check()...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if errs := (tlsfiles.ServerConfig{}).Check(); len(errs) > 0 {
		t.Errorf("zero config: %v", errs)
	}
}

func TestWatchStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		tlsfiles.Watch(ctx, time.Millisecond, func() { n <- struct{}{} })
		close(done)
	}()
	<-n
	cancel()
	<-done
	tlsfiles.Watch(context.Background(), 0, func() { t.Fatal("polled with interval 0") })
}

// send presents c whatever CAs the server asks for (crypto/tls would
// otherwise withhold a certificate the server's CA list does not name).
func send(c tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
}

// A client CA removed by a reload cannot be bypassed by resuming a session
// established before it: crypto/tls (as of the Go in go.mod) refuses to
// resume such a session under the new ClientCAs; this pins that, since
// every reload is such a config change.
func TestServerClientCARotationEndsSessions(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	f := ca.Server(t, "127.0.0.1").Write(t, dir, "server")
	oldCA, newCA := tlstest.NewCA(t, "old clients"), tlstest.NewCA(t, "new clients")
	bundle := filepath.Join(dir, "clients.pem")
	tlstest.WriteFile(t, bundle, oldCA.PEM)
	s, err := tlsfiles.NewServer(tlsfiles.ServerConfig{CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: bundle}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config())
	cache := tls.NewLRUClientSessionCache(8)
	client := &tls.Config{RootCAs: ca.Pool(), ClientSessionCache: cache, Certificates: []tls.Certificate{oldCA.Client(t, "app").TLS(t)}}
	for i := 0; i < 2; i++ { // the second connection may resume
		if _, err := dial(addr, client); err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
	}
	tlstest.WriteFile(t, bundle, newCA.PEM)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	client.GetClientCertificate = send(oldCA.Client(t, "app").TLS(t))
	if _, err := dial(addr, client); err == nil {
		t.Fatal("a client of the removed CA got in (resumed session?)")
	}
}
