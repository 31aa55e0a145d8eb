package fetchmedia

import (
	"net/netip"
	"testing"
)

// ACCEPTANCE 75, 76, 77: the guard judged directly on every listed address.
func TestGuardMatrix(t *testing.T) {
	cases := []struct {
		addr                   string
		def, private, loopback bool // allowed by default / with allow_private_networks / with allow_loopback
	}{
		{"169.254.169.254", false, false, false},
		{"127.0.0.1", false, false, true},
		{"127.3.4.5", false, false, true},
		{"::1", false, false, true},
		{"fe80::1", false, false, false},
		{"fe80::1%eth0", false, false, false},
		{"0.0.0.0", false, false, false},
		{"::", false, false, false},
		{"100.64.0.1", false, false, false},
		{"10.0.0.1", false, true, false},
		{"172.16.0.1", false, true, false},
		{"172.31.255.255", false, true, false},
		{"192.168.1.1", false, true, false},
		{"fc00::1", false, false, false},
		{"fd12::1", false, false, false},
		{"::ffff:169.254.169.254", false, false, false},
		{"::ffff:10.0.0.1", false, true, false},
		{"::ffff:127.0.0.1", false, false, true},
		{"224.0.0.1", false, false, false},
		{"ff02::1", false, false, false},
		{"255.255.255.255", false, false, false},
		{"64:ff9b::a9fe:a9fe", false, false, false}, // NAT64 of 169.254.169.254
		{"2002:a9fe:a9fe::1", false, false, false},  // 6to4 of 169.254.169.254
		{"8.8.8.8", true, true, true},
		{"2001:4860:4860::8888", true, true, true},
		{"172.32.0.1", true, true, true},
		{"64:ff9b::808:808", true, true, true}, // NAT64 of 8.8.8.8
	}
	for _, c := range cases {
		ip := netip.MustParseAddr(c.addr)
		for _, g := range []struct {
			name  string
			guard Guard
			want  bool
		}{
			{"default", Guard{}, c.def},
			{"allow_private_networks", Guard{AllowPrivate: true}, c.private},
			{"allow_loopback", Guard{AllowLoopback: true}, c.loopback},
		} {
			why := g.guard.Blocked(ip)
			if got := why == ""; got != g.want {
				t.Errorf("%s with %s: allowed=%v (%q), want %v", c.addr, g.name, got, why, g.want)
			}
		}
	}
	// Both opt-ins together still block metadata, CGNAT and unique-local.
	both := Guard{AllowPrivate: true, AllowLoopback: true}
	for _, a := range []string{"169.254.169.254", "100.64.0.1", "fc00::1", "0.0.0.0"} {
		if both.Blocked(netip.MustParseAddr(a)) == "" {
			t.Errorf("%s allowed with both opt-ins", a)
		}
	}
}
