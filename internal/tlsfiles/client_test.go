package tlsfiles_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/celflow/celflow/internal/tlsfiles"
	"github.com/celflow/celflow/internal/tlsfiles/tlstest"
)

// clientDial handshakes through Client.DialTLS and reads the server's byte.
func clientDial(c *tlsfiles.Client, addr string) error {
	d := &net.Dialer{}
	conn, err := c.DialTLS(d.DialContext)(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if n, err := conn.Read(make([]byte, 1)); n != 1 {
		return err
	}
	return nil
}

func TestClientVerifies(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "worker CA")
	other := tlstest.NewCA(t, "other CA")
	tlstest.WriteFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	tlstest.WriteFile(t, filepath.Join(dir, "other.pem"), other.PEM)
	byIP := ca.Server(t, "127.0.0.1").Write(t, dir, "ip")
	byName := ca.Server(t, "worker.svc").Write(t, dir, "name")
	clientCA := tlstest.NewCA(t, "celflow CA")
	tlstest.WriteFile(t, filepath.Join(dir, "clients.pem"), clientCA.PEM)
	celflow := clientCA.Client(t, "celflow").Write(t, dir, "celflow")

	srv := func(f tlstest.Files, mtls bool) string {
		cfg := tlsfiles.ServerConfig{CertFile: f.Cert, KeyFile: f.Key}
		if mtls {
			cfg.ClientCAFile = filepath.Join(dir, "clients.pem")
		}
		s, err := tlsfiles.NewServer(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return serve(t, s.Config())
	}
	ipAddr, nameAddr, mtlsAddr := srv(byIP, false), srv(byName, false), srv(byIP, true)
	caFile := filepath.Join(dir, "ca.pem")

	for _, tc := range []struct {
		name string
		cfg  tlsfiles.ClientConfig
		addr string
		err  string
	}{
		{"CA bundle, IP SAN", tlsfiles.ClientConfig{CAFile: caFile}, ipAddr, ""},
		{"wrong CA", tlsfiles.ClientConfig{CAFile: filepath.Join(dir, "other.pem")}, ipAddr, "unknown authority"},
		{"system roots do not know the test CA", tlsfiles.ClientConfig{MinVersion: "1.3"}, ipAddr, "unknown authority"},
		{"name mismatch is refused", tlsfiles.ClientConfig{CAFile: caFile}, nameAddr, "127.0.0.1"},
		{"server_name override", tlsfiles.ClientConfig{CAFile: caFile, ServerName: "worker.svc"}, nameAddr, ""},
		{"insecure_skip_verify", tlsfiles.ClientConfig{InsecureSkipVerify: true}, nameAddr, ""},
		{"mTLS without a client certificate", tlsfiles.ClientConfig{CAFile: caFile}, mtlsAddr, "certificate required"},
		{"mTLS with a client certificate", tlsfiles.ClientConfig{CAFile: caFile, CertFile: celflow.Cert, KeyFile: celflow.Key}, mtlsAddr, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tlsfiles.NewClient(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = clientDial(c, tc.addr)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("dial: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// A rotated CA bundle applies to the next connection; a broken one keeps
// the previous pool.
func TestClientReload(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := tlstest.NewCA(t, "old CA"), tlstest.NewCA(t, "new CA")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, oldCA.PEM)
	newSrv := newCA.Server(t, "127.0.0.1").Write(t, dir, "srv")
	s, err := tlsfiles.NewServer(tlsfiles.ServerConfig{CertFile: newSrv.Cert, KeyFile: newSrv.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config())
	c, err := tlsfiles.NewClient(tlsfiles.ClientConfig{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := clientDial(c, addr); err == nil {
		t.Fatal("verified against the old CA")
	}
	if err := c.Reload(); !errors.Is(err, tlsfiles.ErrUnchanged) {
		t.Fatalf("unchanged reload = %v", err)
	}
	tlstest.WriteFile(t, caFile, append(append([]byte{}, oldCA.PEM...), newCA.PEM...))
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := clientDial(c, addr); err != nil {
		t.Fatalf("after reload: %v", err)
	}
	tlstest.WriteFile(t, caFile, []byte("garbage"))
	if err := c.Reload(); err == nil || errors.Is(err, tlsfiles.ErrUnchanged) {
		t.Fatalf("garbage bundle: %v", err)
	}
	if err := clientDial(c, addr); err != nil {
		t.Fatalf("the previous pool should serve on: %v", err)
	}
}

func TestClientConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		cfg  tlsfiles.ClientConfig
		want string
	}{
		{tlsfiles.ClientConfig{KeyFile: "k"}, "cert_file:"},
		{tlsfiles.ClientConfig{CAFile: "c", InsecureSkipVerify: true}, "insecure_skip_verify:"},
		{tlsfiles.ClientConfig{MinVersion: "1.0"}, "min_version:"},
	} {
		if err := errors.Join(tc.cfg.Check()...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := tlsfiles.NewClient(tlsfiles.ClientConfig{CAFile: "/nonexistent/ca.pem"}); err == nil {
		t.Error("a missing CA file loaded")
	}
	if (tlsfiles.ClientConfig{}).Configured() || !(tlsfiles.ClientConfig{ServerName: "x"}).Configured() {
		t.Error("Configured")
	}
}
