// Package tlsfiles keeps TLS material that lives in files (a certificate and
// key pair, a CA bundle) current while a process serves: the material is
// parsed into an immutable snapshot behind an atomic pointer, handshakes read
// the snapshot current when they start (crypto/tls callbacks), and Reload
// swaps in a new snapshot only when every file of the new set parses and the
// pair matches. A broken replacement leaves the previous snapshot serving, so
// a half-written Secret never takes the listener down; connections already
// established are never touched.
//
// The server side (Server) backs celflow's listener (server.tls); the client
// side (Client) backs the upstream transport (upstream.tls). Both reload on
// demand (SIGHUP) and on a poll of the files' contents (Watch): a content hash
// rather than mtimes, because Kubernetes swaps Secret volumes through a
// symlink whose target's mtime says nothing useful.
package tlsfiles

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// maxFile bounds a PEM file read: certificate chains and CA bundles are a
// few hundred KiB at most (the Mozilla bundle is ~220 KiB).
const maxFile = 4 << 20

// ErrUnchanged is returned by Reload when no file changed since the last
// reload that succeeded (or since the last one that failed: a broken set
// is reported once, not on every poll).
var ErrUnchanged = errors.New("tls files unchanged")

// KeyError is a setting that cannot work, at its key as the YAML spells it
// under the tls section (cert_file, min_version...): callers place it at
// that key without reading the text.
type KeyError struct {
	Key, Msg string
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Msg }

func keyErr(key, format string, args ...any) error {
	return &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Versions maps the config's version names to crypto/tls constants. 1.0 and
// 1.1 are not offered: they are deprecated (RFC 8996) and the floor exists
// to refuse them.
var Versions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// version turns a config name into a constant; "" is TLS 1.2.
func version(name string) (uint16, error) {
	if name == "" {
		return tls.VersionTLS12, nil
	}
	if v, ok := Versions[name]; ok {
		return v, nil
	}
	return 0, keyErr("min_version", "want \"1.2\" or \"1.3\", got %q", name)
}

// fileSet reads a set of files (empty names are skipped) and hashes their
// contents together with extra, so that a change of any file or setting
// yields a new sum.
type fileSet struct {
	data map[string][]byte
	sum  [32]byte
}

func readFiles(extra string, names ...string) (*fileSet, error) {
	fs := &fileSet{data: map[string][]byte{}}
	h := sha256.New()
	h.Write([]byte(extra))
	for _, n := range names {
		h.Write([]byte{0})
		if n == "" {
			continue
		}
		b, err := readFile(n)
		if err != nil {
			return nil, err
		}
		fs.data[n] = b
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(b)
	}
	copy(fs.sum[:], h.Sum(nil))
	return fs, nil
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxFile)
	}
	return b, nil
}

// pair parses a certificate chain and its key, and fills Leaf.
func pair(fs *fileSet, certFile, keyFile string) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(fs.data[certFile], fs.data[keyFile])
	if err != nil {
		return nil, fmt.Errorf("%s + %s: %w", certFile, keyFile, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", certFile, err)
		}
	}
	return &c, nil
}

// pool parses a PEM CA bundle; a bundle without one certificate is an error
// (an empty pool would refuse every peer, silently).
func pool(fs *fileSet, name string) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(fs.data[name]) {
		return nil, fmt.Errorf("%s: no PEM certificate found", name)
	}
	return p, nil
}

// Watch calls reload every interval until ctx is done; interval ≤ 0
// returns at once (polling off).
func Watch(ctx context.Context, interval time.Duration, reload func()) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			reload()
		}
	}
}

// settle retries a load that failed while its files were changing: the
// files of a set are read one after the other, and a Secret swap between
// two reads yields a new certificate with an old key. A failure is final
// once the files read the same twice in a row (or after a few tries).
func settle[T any](load func() (T, [32]byte, error)) (T, [32]byte, error) {
	v, sum, err := load()
	for try := 0; err != nil && try < 3; try++ {
		v2, sum2, err2 := load()
		if sum2 == sum {
			break
		}
		v, sum, err = v2, sum2, err2
	}
	return v, sum, err
}
