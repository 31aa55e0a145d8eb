package upstream

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/celflow/celflow/engine/tlsfiles"
)

// ErrTLSUnchanged: ReloadTLS found no changed file.
var ErrTLSUnchanged = tlsfiles.ErrUnchanged

// ReloadTLS re-reads the upstream.tls files (SIGHUP, the file poll). New
// connections use the new material; pooled ones keep theirs until they
// close (idle_timeout). It returns nil when the new set is in use,
// ErrTLSUnchanged when no file changed or upstream.tls is not set, and
// another error when the new set is broken (the previous one stays).
func (c *Client) ReloadTLS() error {
	if c.impl.tls == nil {
		return ErrTLSUnchanged
	}
	return c.impl.tls.Reload()
}

// TLSClientLeaf is the client certificate shown to upstreams now, nil when
// none.
func (c *Client) TLSClientLeaf() *x509.Certificate {
	if c.impl.tls == nil {
		return nil
	}
	return c.impl.tls.Leaf()
}

// TLSInsecure reports upstream.tls.insecure_skip_verify (the caller logs it).
func (c *Client) TLSInsecure() bool { return c.impl.cfg.TLS.InsecureSkipVerify }

// prefixKeys turns tlsfiles' "key: message" errors into
// "upstream.<section>.key: message" lines, as withDefaults reports; an
// error without a key (a file that does not load) names the section.
func prefixKeys(section string, err error) error {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		key, msg, ok := strings.Cut(l, ": ")
		if ok && !strings.ContainsAny(key, " /.") {
			lines = append(lines, fmt.Sprintf("upstream.%s.%s: %s", section, key, msg))
		} else {
			lines = append(lines, fmt.Sprintf("upstream.%s: %s", section, l))
		}
	}
	return errors.New(strings.Join(lines, "\n"))
}
