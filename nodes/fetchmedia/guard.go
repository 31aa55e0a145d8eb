package fetchmedia

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// Guard is the SSRF policy (docs/protocol.md, fetch-media): which addresses a media download
// may dial. It judges the address actually dialled, so DNS rebinding and
// every redirect hop are covered.
type Guard struct {
	AllowPrivate  bool // opens RFC 1918 (10/8, 172.16/12, 192.168/16) only
	AllowLoopback bool // opens 127/8 and ::1 (tests)
}

var (
	cgnat     = netip.MustParsePrefix("100.64.0.0/10")
	uniqLocal = netip.MustParsePrefix("fc00::/7")
	thisNet   = netip.MustParsePrefix("0.0.0.0/8")
	reserved  = netip.MustParsePrefix("240.0.0.0/4") // incl. 255.255.255.255
	ietfProto = netip.MustParsePrefix("192.0.0.0/24")
	v4compat  = netip.MustParsePrefix("::/96")        // deprecated IPv4-compatible
	nat64     = netip.MustParsePrefix("64:ff9b::/96") // embeds an IPv4 target
	sixToFour = netip.MustParsePrefix("2002::/16")    // embeds an IPv4 target
)

// Blocked returns why ip may not be dialled, or "" when it may. IPv4-mapped
// IPv6 addresses are judged as the IPv4 address they carry, and so are the
// IPv4 targets embedded in NAT64 and 6to4 addresses.
func (g Guard) Blocked(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	switch {
	case !ip.IsValid():
		return "an invalid address"
	case ip.IsUnspecified() || thisNet.Contains(ip):
		return "an unspecified address"
	case ip.IsLoopback():
		if g.AllowLoopback {
			return ""
		}
		return "a loopback address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsMulticast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast():
		return "a multicast address"
	case cgnat.Contains(ip):
		return "a shared (CGNAT) address"
	case uniqLocal.Contains(ip):
		return "a unique-local address"
	case reserved.Contains(ip) || ietfProto.Contains(ip):
		return "a reserved address"
	case ip.Is4() && ip.IsPrivate():
		if g.AllowPrivate {
			return ""
		}
		return "a private address"
	case ip.Is6() && v4compat.Contains(ip):
		return "an IPv4-compatible address"
	case ip.Is6() && nat64.Contains(ip):
		b := ip.As16()
		return g.Blocked(netip.AddrFrom4([4]byte(b[12:16])))
	case ip.Is6() && sixToFour.Contains(ip):
		b := ip.As16()
		return g.Blocked(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return ""
}

// blockedError is a dial refused by the guard: the client's media is
// rejected (invalid_media), not merely unobtainable.
type blockedError struct {
	Host   string
	Addr   netip.Addr
	Reason string
}

func (e *blockedError) Error() string {
	if e.Host != "" && e.Host != e.Addr.String() {
		return fmt.Sprintf("host %s resolves to %s, which is blocked", e.Host, e.Reason)
	}
	return fmt.Sprintf("%s is blocked", e.Reason)
}

// resolveError is a name that did not resolve.
type resolveError struct {
	Host string
	Err  error
}

func (e *resolveError) Error() string { return "host " + e.Host + " does not resolve" }
func (e *resolveError) Unwrap() error { return e.Err }

// LookupFunc resolves a host name; tests substitute one so that a name like
// "localhost" deterministically resolves to loopback.
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

func defaultLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// resolve returns host's addresses after checking every one of them: a
// single blocked address rejects the host, so a name cannot smuggle an
// internal address among public ones.
func (g Guard) resolve(ctx context.Context, lookup LookupFunc, host string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = lookup(ctx, host)
		if err != nil {
			return nil, &resolveError{Host: host, Err: err}
		}
		if len(addrs) == 0 {
			return nil, &resolveError{Host: host, Err: errors.New("no addresses")}
		}
	}
	for _, a := range addrs {
		if why := g.Blocked(a); why != "" {
			return nil, &blockedError{Host: host, Addr: a, Reason: why}
		}
	}
	return addrs, nil
}

// dialer dials media hosts: it resolves the name itself, applies the guard
// to every address, then dials the checked addresses. Control re-checks the
// socket's final address as defence in depth.
type dialer struct {
	guard  Guard
	lookup LookupFunc
	net    net.Dialer
}

func newDialer(g Guard, lookup LookupFunc) *dialer {
	d := &dialer{guard: g, lookup: lookup}
	d.net.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("unexpected dial address %q", address)
		}
		if why := g.Blocked(ap.Addr()); why != "" {
			return &blockedError{Addr: ap.Addr(), Reason: why}
		}
		return nil
	}
	return d
}

func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	addrs, err := d.guard.resolve(ctx, d.lookup, host)
	if err != nil {
		return nil, err
	}
	var first error
	for _, a := range addrs {
		c, err := d.net.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}
