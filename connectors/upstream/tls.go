package upstream

import (
	"crypto/x509"
	"errors"

	"github.com/celflow/celflow/internal/tlsfiles"
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

// tlsErrors turns tlsfiles' errors into *FieldError values as withDefaults
// reports them: a setting (*tlsfiles.KeyError) at upstream.tls.key; a file
// that does not load at the section (its message names the file).
func tlsErrors(err error) error {
	var errs []error
	for _, e := range unjoin(err) {
		var ke *tlsfiles.KeyError
		if errors.As(e, &ke) {
			errs = append(errs, &FieldError{Key: "tls." + ke.Key, Ptr: "/tls/" + ke.Key, Msg: ke.Msg})
		} else {
			errs = append(errs, &FieldError{Key: "tls", Ptr: "/tls", Msg: e.Error()})
		}
	}
	return errors.Join(errs...)
}

// unjoin lists the errors errors.Join joined (err itself otherwise).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
