// Package tlstest makes throw-away PKI for tests that run real TLS
// handshakes on 127.0.0.1: a CA, server and client leaves signed by it, PEM
// files written atomically (rename, as a Kubernetes Secret update is). No
// key material is ever committed.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA makes a CA valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := genKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: c, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is a signed end-entity certificate with its key, in PEM.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// TLS is the leaf as a tls.Certificate (for a client or a server).
func (l *Leaf) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Server issues a server certificate for hosts (IPs or DNS names).
func (ca *CA) Server(t testing.TB, hosts ...string) *Leaf {
	return ca.issue(t, x509.ExtKeyUsageServerAuth, "server", hosts)
}

// Client issues a client certificate with common name cn.
func (ca *CA) Client(t testing.TB, cn string) *Leaf {
	return ca.issue(t, x509.ExtKeyUsageClientAuth, cn, nil)
}

func (ca *CA) issue(t testing.TB, usage x509.ExtKeyUsage, cn string, hosts []string) *Leaf {
	t.Helper()
	key := genKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Leaf{Cert: c,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}
}

// Files are a leaf's PEM files in a directory.
type Files struct{ Cert, Key string }

// Write writes the leaf as dir/name.crt and dir/name.key, each atomically.
func (l *Leaf) Write(t testing.TB, dir, name string) Files {
	t.Helper()
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	WriteFile(t, f.Key, l.KeyPEM)
	WriteFile(t, f.Cert, l.CertPEM)
	return f
}

// WriteFile replaces path with data atomically (a temporary file renamed
// over it), so a reader sees the old bytes or the new, never half.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		t.Fatal(err)
	}
}

func genKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Secret mimics a Kubernetes Secret volume (the kubelet's atomic writer):
// Dir/tls.crt and Dir/tls.key are symlinks through Dir/..data, itself a
// symlink to a versioned directory; Update writes a new version and swaps
// ..data with one rename, so a reader never sees a new key with an old
// certificate.
type Secret struct {
	Dir string
	n   int
}

// NewSecret makes the volume in dir holding l.
func NewSecret(t testing.TB, dir string, l *Leaf) *Secret {
	t.Helper()
	s := &Secret{Dir: dir}
	s.Update(t, l)
	for _, n := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// Files are the paths a server is configured with.
func (s *Secret) Files() Files {
	return Files{Cert: filepath.Join(s.Dir, "tls.crt"), Key: filepath.Join(s.Dir, "tls.key")}
}

// Update publishes l atomically.
func (s *Secret) Update(t testing.TB, l *Leaf) {
	t.Helper()
	s.n++
	ver := filepath.Join(s.Dir, "..v"+string(rune('0'+s.n%10))+time.Now().Format("150405.000000000"))
	if err := os.Mkdir(ver, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ver, "tls.crt"), l.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ver, "tls.key"), l.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(s.Dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ver), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
}
