package sim

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
)

// simTLS is the TLS flags of `celflow-sim` and `celflow-sim gateway`, so
// that end-to-end tests run real handshakes on every hop.
type simTLS struct{ cert, key, clientCA string }

func tlsFlags(fs *flag.FlagSet) *simTLS {
	t := &simTLS{}
	fs.StringVar(&t.cert, "tls-cert", "", "serve HTTPS with this PEM certificate chain (with --tls-key)")
	fs.StringVar(&t.key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&t.clientCA, "tls-client-ca", "", "require client certificates signed by this PEM bundle (mTLS)")
	return t
}

// config is the listener's tls.Config, nil for plain HTTP. HTTP/1.1 only,
// as uvicorn serves vLLM.
func (t *simTLS) config() (*tls.Config, error) {
	if t.cert == "" && t.key == "" {
		if t.clientCA != "" {
			return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	if t.cert == "" || t.key == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	c, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if t.clientCA != "" {
		if conf.ClientCAs, err = caPool(t.clientCA); err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
}

func caPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate found", file)
	}
	return p, nil
}
