package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
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

// pki is a throwaway CA and the files signed by it, all generated in the test.
type pki struct {
	dir           string
	caCert        *x509.Certificate
	caKey         *ecdsa.PrivateKey
	ca, cert, key string // CA, serving certificate and key (PEM files)
	client, ckey  string // client certificate (CN admin, O system:masters) and key
	saPub, saKey  string // service-account signing key pair
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (p *pki) sign(t *testing.T, name string, tmpl *x509.Certificate) (certPath, keyPath string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &k.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "PRIVATE KEY", kd)
	return certPath, keyPath
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "celflow-ci-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, ca, ca, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	p.caCert, _ = x509.ParseCertificate(der)
	p.caKey = k
	p.ca = filepath.Join(p.dir, "ca.crt")
	writePEM(t, p.ca, "CERTIFICATE", der)
	p.cert, p.key = p.sign(t, "serving", &x509.Certificate{
		Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.client, p.ckey = p.sign(t, "admin", &x509.Certificate{
		Subject:  pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	p.saPub, p.saKey = filepath.Join(p.dir, "sa.pub"), filepath.Join(p.dir, "sa.key")
	writePEM(t, p.saPub, "PUBLIC KEY", pub)
	writePEM(t, p.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa))
	return p
}

type tlsFiles struct{ cert, key, ca string }

// writeTLSFiles stands in for the kubernetes.io/tls Secret the chart mounts.
func writeTLSFiles(t *testing.T) tlsFiles {
	p := newPKI(t)
	return tlsFiles{cert: p.cert, key: p.key, ca: p.ca}
}
