package front

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Early resets (HTTP/2 rapid reset, CVE-2023-44487, redialled).
//
// Go closes an HTTP/2 connection after about a thousand streams reset
// before their handler finished, but the client simply redials: the bound
// is per connection, and each reset stream still starts a handler. celflow
// therefore counts, per client address, the requests the client abandoned
// early, and refuses an address that keeps doing it:
//   - an early reset is a request whose context the client cancelled (an
//     RST_STREAM, or a closed connection) while its handler still ran, when
//     nothing of the reply had been written or the request was younger than
//     earlyReset. A chat user who presses "stop" after the first tokens
//     does not count; a client that opens streams and resets them does.
//   - above ResetLimit early resets within ResetWindow (a sliding window),
//     the address is refused for ResetCooldown: its new connections are
//     closed at accept, before the TLS handshake (connguard.go), and the
//     connection an early reset arrives on is closed at once.
//
// The key is the peer address: an IPv4 address, or the /64 of an IPv6 one
// (one host commonly holds a whole /64). The table is bounded (resetTable,
// least recently used entries evicted), so an attacker spraying addresses
// costs bounded memory; evicting its own entry only buys it one redial
// before the limit trips again.

// Reset policy defaults (server.reset_limit, reset_window, reset_cooldown).
const (
	DefaultResetLimit    = 500
	DefaultResetWindow   = 10 * time.Second
	DefaultResetCooldown = 30 * time.Second
	// resetTableSize bounds the addresses tracked (about 100 bytes each).
	resetTableSize = 16384
	// earlyReset: a request cancelled by its client younger than this is
	// an early reset even when an (error) reply had already been written.
	earlyReset = time.Second
)

// ResetPolicy is the early-reset policy (Options.Resets). A zero Limit
// turns it off.
type ResetPolicy struct {
	Limit    int           // early resets tolerated per Window; 0: no policy
	Window   time.Duration // sliding window the resets are counted over
	Cooldown time.Duration // how long an address above the limit is refused
}

// clientKey is the address key of a peer: the IPv4 address, or the IPv6 /64.
func clientKey(a net.Addr) (netip.Prefix, bool) {
	var ip netip.Addr
	switch v := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(v.IP)
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Prefix{}, false
		}
		ip = ap.Addr()
	}
	ip = ip.Unmap()
	if !ip.IsValid() {
		return netip.Prefix{}, false
	}
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, err := ip.Prefix(bits)
	return p, err == nil
}

// resetEntry is one address's sliding-window counter (the previous
// window's count weighted by how much of it still overlaps) and its ban.
type resetEntry struct {
	key         netip.Prefix
	windowStart time.Time
	cur, prev   int
	bannedUntil time.Time
	elem        *list.Element
}

// resetTable counts early resets per address in bounded memory.
type resetTable struct {
	pol  ResetPolicy
	max  int
	now  func() time.Time
	mu   sync.Mutex
	m    map[netip.Prefix]*resetEntry
	lru  list.List // front: most recently used
	bans int       // entries currently banned (a fast path for accept)
}

func newResetTable(p ResetPolicy, size int) *resetTable {
	if p.Limit <= 0 {
		return nil
	}
	if p.Window <= 0 {
		p.Window = DefaultResetWindow
	}
	if p.Cooldown <= 0 {
		p.Cooldown = DefaultResetCooldown
	}
	return &resetTable{pol: p, max: size, now: time.Now, m: make(map[netip.Prefix]*resetEntry)}
}

// note counts one early reset of key and reports whether the address is
// now refused (just tripped or still cooling down).
func (t *resetTable) note(key netip.Prefix) bool {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[key]
	if e == nil {
		if len(t.m) >= t.max {
			t.evict()
		}
		e = &resetEntry{key: key, windowStart: now}
		e.elem = t.lru.PushFront(e)
		t.m[key] = e
	} else {
		t.lru.MoveToFront(e.elem)
	}
	if t.bannedLocked(e, now) {
		return true
	}
	t.roll(e, now)
	e.cur++
	// Sliding window: the previous window counts for the part of it that
	// still lies within Window of now.
	frac := 1 - float64(now.Sub(e.windowStart))/float64(t.pol.Window)
	if float64(e.cur)+float64(e.prev)*frac > float64(t.pol.Limit) {
		e.bannedUntil = now.Add(t.pol.Cooldown)
		e.cur, e.prev = 0, 0
		t.bans++
		return true
	}
	return false
}

// banned reports whether key is cooling down (accept asks this for every
// connection: one uncontended lock, no allocation).
func (t *resetTable) banned(key netip.Prefix) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bans == 0 {
		return false
	}
	e := t.m[key]
	return e != nil && t.bannedLocked(e, t.now())
}

// bannedLocked reports whether e is cooling down, lifting an expired ban.
func (t *resetTable) bannedLocked(e *resetEntry, now time.Time) bool {
	if e.bannedUntil.IsZero() {
		return false
	}
	if now.Before(e.bannedUntil) {
		return true
	}
	e.bannedUntil = time.Time{}
	e.windowStart = now
	t.bans--
	return false
}

// roll advances e's windows to the one holding now.
func (t *resetTable) roll(e *resetEntry, now time.Time) {
	el := now.Sub(e.windowStart)
	switch {
	case el < t.pol.Window:
	case el < 2*t.pol.Window:
		e.prev, e.cur = e.cur, 0
		e.windowStart = e.windowStart.Add(t.pol.Window)
	default:
		e.prev, e.cur = 0, 0
		e.windowStart = now
	}
}

// evict drops the least recently used entry; a banned one only when every
// entry is (an attacker spraying addresses cannot flush the bans of others
// cheaply: it first has to get its own addresses banned).
func (t *resetTable) evict() {
	now := t.now()
	for el := t.lru.Back(); el != nil; el = el.Prev() {
		e := el.Value.(*resetEntry)
		if !t.bannedLocked(e, now) {
			t.drop(e)
			return
		}
	}
	if el := t.lru.Back(); el != nil {
		e := el.Value.(*resetEntry)
		t.bans--
		t.drop(e)
	}
}

func (t *resetTable) drop(e *resetEntry) {
	t.lru.Remove(e.elem)
	delete(t.m, e.key)
}

// rawConnKey carries the accepted connection in a request's context: an
// early reset from a refused address closes it (every stream on it ends).
type rawConnKey struct{}

// noteEarlyReset runs as a request ends (finish): it counts an early reset
// against the client's address and, once the address is refused, closes
// the connection the request came on.
func (s *Server) noteEarlyReset(x *exchange, r *http.Request) {
	if s.resets == nil || r.Context().Err() == nil || s.base.Err() != nil {
		return // not cancelled, or cancelled by our own shutdown
	}
	if !x.firstByte.IsZero() && time.Since(x.start) >= earlyReset {
		return // a reply was under way: the client stopped reading it
	}
	c, _ := r.Context().Value(rawConnKey{}).(net.Conn)
	if c == nil {
		return
	}
	key, ok := clientKey(c.RemoteAddr())
	if !ok {
		return
	}
	if s.opts.Conns != nil {
		s.opts.Conns.EarlyReset()
	}
	if s.resets.note(key) {
		_ = c.Close()
	}
}

// serverConnContext is http.Server.ConnContext: connContext (framing.go)
// plus the accepted connection itself (noteEarlyReset).
func serverConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(connContext(ctx, c), rawConnKey{}, c)
}
