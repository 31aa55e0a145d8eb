package fetchmedia

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"

	"github.com/celflow/celflow/engine"
)

// classify maps a download failure to the error table of docs/errors.md:
// media the client may not ask for is invalid_media; media that could not
// be obtained from the client's URL is media_fetch_failed (both 400); only
// celflow's own infrastructure (the explicit media proxy) gives 502. The
// raw cause is kept for logs only.
func (n *Node) classify(parent, group, item context.Context, d *download, err error) error {
	if cerr := parent.Err(); cerr != nil {
		e := engine.AsError(cerr)
		e.Cause = err
		return e
	}
	if group.Err() != nil && item.Err() != context.DeadlineExceeded {
		return context.Canceled // a sibling failed first; its error wins
	}
	var (
		proxy   *proxyError
		blocked *blockedError
		reject  *rejectError
		large   *tooLargeError
		fetch   *fetchError
		resolve *resolveError
		dns     *net.DNSError
		op      *net.OpError
		certErr *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		hostErr x509.HostnameError
		recErr  tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &blocked):
		return errAt(engine.KindInvalidMedia, d, blocked.Error(), err)
	case errors.As(err, &reject):
		return errAt(engine.KindInvalidMedia, d, reject.Error(), err)
	case errors.As(err, &large):
		return errAt(engine.KindInvalidMedia, d, large.Error(), err)
	case errors.As(err, &proxy):
		return errAt(engine.KindBadGateway, d, proxy.Error(), err)
	case item.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return errAt(engine.KindMediaFetchFailed, d, "download timed out after "+n.cfg.timeout.String(), err)
	case errors.As(err, &fetch):
		return errAt(engine.KindMediaFetchFailed, d, fetch.Error(), err)
	case errors.As(err, &resolve):
		return errAt(engine.KindMediaFetchFailed, d, resolve.Error(), err)
	case errors.As(err, &dns):
		return errAt(engine.KindMediaFetchFailed, d, "host "+dns.Name+" does not resolve", err)
	case errors.As(err, &certErr), errors.As(err, &unknown), errors.As(err, &hostErr), errors.As(err, &recErr),
		strings.Contains(err.Error(), "tls: "):
		return errAt(engine.KindMediaFetchFailed, d, "TLS failure talking to "+d.u.Hostname(), err)
	case errors.As(err, &op) && op.Op == "dial":
		return errAt(engine.KindMediaFetchFailed, d, "could not connect to "+d.u.Hostname(), err)
	}
	return errAt(engine.KindMediaFetchFailed, d, "download from "+d.u.Hostname()+" failed", err)
}
