package tlsfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ServerConfig is the `server.tls:` section. TLS is on when CertFile and
// KeyFile are set, or SelfSigned is.
type ServerConfig struct {
	CertFile, KeyFile string // PEM chain (leaf first) and its private key
	// SelfSigned, without files, serves a certificate generated in process
	// at start-up (ECDSA P-256, one year, SANs localhost, the loopback
	// addresses, the host name and the listen host). For trials only:
	// clients must skip verification or pin its logged fingerprint.
	SelfSigned bool
	MinVersion string // "1.2" (default) or "1.3"
	// ClientCAFile turns on client-certificate verification (mTLS) against
	// this PEM bundle. ClientAuth: "require" (the default when a bundle is
	// set), "optional" (verify a certificate when one is sent) or "none".
	ClientCAFile   string
	ClientAuth     string
	ReloadInterval time.Duration // file poll; 0 = on SIGHUP only
}

// Enabled reports whether the listener serves TLS.
func (c ServerConfig) Enabled() bool { return c.CertFile != "" || c.SelfSigned }

// Check reports settings that cannot work together, each a *KeyError at its
// key as the YAML spells it under server.tls.
func (c ServerConfig) Check() []error {
	var errs []error
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, keyErr("cert_file", "cert_file and key_file go together"))
	}
	if c.SelfSigned && c.CertFile != "" {
		errs = append(errs, keyErr("self_signed", "set either cert_file and key_file, or self_signed"))
	}
	if _, err := version(c.MinVersion); err != nil {
		errs = append(errs, err)
	}
	if _, err := clientAuth(c.ClientAuth, c.ClientCAFile); err != nil {
		errs = append(errs, err)
	}
	if !c.Enabled() && (c.ClientCAFile != "" || c.ClientAuth != "") {
		errs = append(errs, keyErr("client_ca_file", "client certificates need TLS: set cert_file and key_file, or self_signed"))
	}
	return errs
}

func clientAuth(mode, caFile string) (tls.ClientAuthType, error) {
	switch mode {
	case "":
		if caFile != "" {
			return tls.RequireAndVerifyClientCert, nil
		}
		return tls.NoClientCert, nil
	case "none":
		return tls.NoClientCert, nil
	case "optional", "require":
		if caFile == "" {
			return 0, keyErr("client_auth", "%q needs client_ca_file", mode)
		}
		if mode == "optional" {
			return tls.VerifyClientCertIfGiven, nil
		}
		return tls.RequireAndVerifyClientCert, nil
	}
	return 0, keyErr("client_auth", "want \"none\", \"optional\" or \"require\", got %q", mode)
}

// Server is the listener's TLS material. Safe for concurrent use: handshakes
// read the current snapshot lock-free; reloads are serialised.
type Server struct {
	cur atomic.Pointer[serverSnap]

	mu     sync.Mutex // guards what follows: one reload at a time
	cfg    ServerConfig
	badSum [32]byte // the last set that failed, reported once
	self   *tls.Certificate
}

// serverSnap is one loaded set: the per-handshake config and its sum.
type serverSnap struct {
	sum  [32]byte
	conf *tls.Config
}

// alpn: HTTP/2 for clients that offer it, HTTP/1.1 otherwise. The config
// returned per handshake replaces the listener's, so it must carry them.
var alpn = []string{"h2", "http/1.1"}

// NewServer loads cfg (which must be Enabled). hosts are the SANs of a
// self-signed certificate (ignored otherwise).
func NewServer(cfg ServerConfig, hosts []string) (*Server, error) {
	if errs := cfg.Check(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &Server{cfg: cfg}
	if cfg.SelfSigned {
		c, err := SelfSigned(hosts, time.Now(), 365*24*time.Hour)
		if err != nil {
			return nil, err
		}
		s.self = c
	}
	snap, _, err := s.load(cfg)
	if err != nil {
		return nil, err
	}
	s.cur.Store(snap)
	return s, nil
}

// Config is the listener's tls.Config: every handshake gets the snapshot
// current when its ClientHello arrives.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: alpn,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().conf, nil
		},
	}
}

// Leaf is the certificate served now (serial, expiry, fingerprint).
func (s *Server) Leaf() *x509.Certificate { return s.cur.Load().conf.Certificates[0].Leaf }

// Reload re-reads the files with the current settings. It returns
// ErrUnchanged when nothing changed (or when the same broken set was
// already reported); any other error means the previous material serves on.
func (s *Server) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.swap(s.cfg)
}

// Update applies new settings (a config reload): new paths, floor or client
// auth; ErrUnchanged when neither they nor the files changed. Turning TLS
// on or off needs a restart; Update refuses that.
func (s *Server) Update(cfg ServerConfig) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !cfg.Enabled() {
		return errors.New("turning TLS off needs a restart")
	}
	if cfg.SelfSigned && s.self == nil {
		return errors.New("switching to a self-signed certificate needs a restart")
	}
	if errs := cfg.Check(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	err := s.swap(cfg)
	if err != nil && !errors.Is(err, ErrUnchanged) {
		return err
	}
	s.cfg = cfg
	return err
}

func (s *Server) swap(cfg ServerConfig) error {
	snap, sum, err := settle(func() (*serverSnap, [32]byte, error) { return s.load(cfg) })
	if err != nil {
		if sum != [32]byte{} && sum == s.badSum {
			return ErrUnchanged
		}
		s.badSum = sum
		return err
	}
	if snap.sum == s.cur.Load().sum {
		return ErrUnchanged
	}
	s.badSum = [32]byte{}
	s.cur.Store(snap)
	return nil
}

func settings(c ServerConfig) string {
	return fmt.Sprintf("%t|%s|%s|%s", c.SelfSigned, c.MinVersion, c.ClientAuth, c.ClientCAFile)
}

// load reads and parses one set; nothing is stored. sum is the set's
// content hash, zero when a file could not be read.
func (s *Server) load(cfg ServerConfig) (*serverSnap, [32]byte, error) {
	fs, err := readFiles(settings(cfg), cfg.CertFile, cfg.KeyFile, cfg.ClientCAFile)
	if err != nil {
		return nil, [32]byte{}, err
	}
	conf := &tls.Config{NextProtos: alpn}
	conf.MinVersion, _ = version(cfg.MinVersion) // Check ran
	conf.ClientAuth, _ = clientAuth(cfg.ClientAuth, cfg.ClientCAFile)
	cert := s.self
	if cfg.CertFile != "" {
		if cert, err = pair(fs, cfg.CertFile, cfg.KeyFile); err != nil {
			return nil, fs.sum, err
		}
	}
	conf.Certificates = []tls.Certificate{*cert}
	if cfg.ClientCAFile != "" {
		if conf.ClientCAs, err = pool(fs, cfg.ClientCAFile); err != nil {
			return nil, fs.sum, err
		}
	}
	return &serverSnap{sum: fs.sum, conf: conf}, fs.sum, nil
}

// SelfSigned generates a self-signed ECDSA P-256 server certificate for
// hosts (DNS names or IP addresses), valid from now-1h for validity.
func SelfSigned(hosts []string, now time.Time, validity time.Duration) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "celflow self-signed"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // so that a client may trust it as its own root
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Fingerprint is a certificate's SHA-256 fingerprint in hex, for logs.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}
