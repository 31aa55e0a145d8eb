package upstream

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeClock is a settable time source for passive health.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time { return f.t }

// newDirect builds a direct client with n endpoints per listed role
// (http://<role>-<i>:8000) and a fake clock on every pool.
func newDirect(t testing.TB, cfg Config, n int, roles ...Role) (*Client, *fakeClock) {
	t.Helper()
	cfg.Mode = modeDirect
	cfg.Pools = map[Role][]Endpoint{}
	for _, r := range roles {
		for i := range n {
			cfg.Pools[r] = append(cfg.Pools[r], Endpoint{URL: fmt.Sprintf("http://%s-%d:8000/", r, i)})
		}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1000, 0)}
	for _, p := range c.impl.pools {
		if p != nil {
			p.now = clk.now
		}
	}
	return c, clk
}

func mustPick(t testing.TB, c *Client, r Role, exclude ...string) *Target {
	t.Helper()
	tg, err := c.Pick(r, exclude...)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestRoundRobinFairness(t *testing.T) {
	c, _ := newDirect(t, Config{}, 3, RolePrefill)
	counts := map[string]int{}
	var seq []string
	for range 300 {
		tg := mustPick(t, c, RolePrefill)
		counts[tg.Base]++
		if len(seq) < 6 {
			seq = append(seq, tg.Base)
		}
		tg.Done(false)
	}
	for i := range 3 {
		if b := fmt.Sprintf("http://prefill-%d:8000", i); counts[b] != 100 {
			t.Errorf("%s picked %d times, want 100 (%v)", b, counts[b], counts)
		}
	}
	if seq[0] == seq[1] || seq[0] != seq[3] || seq[1] != seq[4] {
		t.Errorf("not a rotation: %v", seq)
	}
}

func TestLeastInFlight(t *testing.T) {
	c, _ := newDirect(t, Config{Picker: pickLeastInFlight}, 3, RoleDecode)
	// Three picks spread over three idle endpoints.
	held := map[string]*Target{}
	for range 3 {
		tg := mustPick(t, c, RoleDecode)
		if held[tg.Base] != nil {
			t.Fatalf("%s picked twice while others were idle", tg.Base)
		}
		held[tg.Base] = tg
	}
	// Free one: the next pick must land there, whatever the rotation says.
	held["http://decode-1:8000"].Done(false)
	for range 5 {
		tg := mustPick(t, c, RoleDecode)
		if tg.Base != "http://decode-1:8000" {
			t.Fatalf("picked %s, want the only idle endpoint decode-1", tg.Base)
		}
		tg.Done(false)
	}
	if tg := mustPick(t, c, RoleDecode); tg.Endpoint == nil || tg.Endpoint.URL != "http://decode-1:8000/" || tg.Host != "decode-1" {
		t.Errorf("target = %+v", tg)
	}
}

func TestPickExclude(t *testing.T) {
	c, _ := newDirect(t, Config{}, 2, RolePrefill)
	for range 10 {
		tg := mustPick(t, c, RolePrefill, "http://prefill-0:8000")
		if tg.Base != "http://prefill-1:8000" {
			t.Fatalf("excluded endpoint picked: %s", tg.Base)
		}
		tg.Done(false)
	}
	// Excluding everything still gives a target: a retry needs somewhere to go.
	tg := mustPick(t, c, RolePrefill, "http://prefill-0:8000/", "http://prefill-1:8000")
	if tg.Base == "" {
		t.Fatal("no target when all are excluded")
	}
}

func TestEjection(t *testing.T) {
	tests := []struct {
		name     string
		outcomes []bool // failed? per leg on prefill-0
		ejected  bool
	}{
		{"threshold consecutive failures eject", []bool{true, true, true}, true},
		{"below threshold stays", []bool{true, true}, false},
		{"a success resets the streak", []bool{true, true, false, true, true}, false},
		{"streak after a success ejects", []bool{true, false, true, true, true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newDirect(t, Config{FailureThreshold: 3, EjectFor: 10 * time.Second}, 2, RolePrefill)
			for _, failed := range tt.outcomes {
				tg := mustPick(t, c, RolePrefill, "http://prefill-1:8000")
				if tg.Base != "http://prefill-0:8000" {
					t.Fatalf("setup: picked %s", tg.Base)
				}
				tg.Done(failed)
			}
			got := pickedSet(t, c, RolePrefill, 10)
			if ejected := !got["http://prefill-0:8000"]; ejected != tt.ejected {
				t.Fatalf("ejected = %v, want %v (picked %v)", ejected, tt.ejected, got)
			}
			if !tt.ejected {
				return
			}
			// Ejected: an exclusion of the other endpoint cannot bring it back...
			if tg := mustPick(t, c, RolePrefill, "http://prefill-1:8000"); tg.Base != "http://prefill-1:8000" {
				t.Errorf("ejected endpoint picked over an exclusion: %s", tg.Base)
			}
			// ...but the end of the period does.
			clk.t = clk.t.Add(10 * time.Second)
			if got := pickedSet(t, c, RolePrefill, 10); !got["http://prefill-0:8000"] {
				t.Errorf("ejected endpoint did not rejoin: %v", got)
			}
		})
	}
}

// FIELD-NOTES 5: never eject the last healthy endpoint of a role.
func TestNeverEjectLast(t *testing.T) {
	c, _ := newDirect(t, Config{FailureThreshold: 2}, 2, RoleEncode)
	failAll := func(base string, n int) {
		for range n {
			tg := mustPick(t, c, RoleEncode, other(base))
			if tg.Base != base {
				t.Fatalf("picked %s, want %s", tg.Base, base)
			}
			tg.Done(true)
		}
	}
	failAll("http://encode-0:8000", 2) // ejected
	// encode-1 is now the last healthy endpoint: failures never eject it.
	for range 10 {
		tg := mustPick(t, c, RoleEncode)
		if tg.Base != "http://encode-1:8000" {
			t.Fatalf("picked ejected %s", tg.Base)
		}
		tg.Done(true)
	}
	// A pool of one is never emptied either.
	one, _ := newDirect(t, Config{FailureThreshold: 1}, 1, RoleDecode)
	for range 5 {
		mustPick(t, one, RoleDecode).Done(true)
	}
	if tg := mustPick(t, one, RoleDecode); tg.Base != "http://decode-0:8000" {
		t.Fatalf("single endpoint: %s", tg.Base)
	}
}

func other(base string) string {
	if strings.HasSuffix(base, "-0:8000") {
		return strings.Replace(base, "-0:", "-1:", 1)
	}
	return strings.Replace(base, "-1:", "-0:", 1)
}

func pickedSet(t *testing.T, c *Client, r Role, n int) map[string]bool {
	got := map[string]bool{}
	for range n {
		tg := mustPick(t, c, r)
		got[tg.Base] = true
		tg.Done(false)
	}
	return got
}

func TestDoneOnce(t *testing.T) {
	c, _ := newDirect(t, Config{}, 1, RoleDecode)
	tg := mustPick(t, c, RoleDecode)
	tg.Done(false)
	tg.Done(false)
	if n := c.impl.pools[roleIndex(RoleDecode)].eps[0].inflight.Load(); n != 0 {
		t.Fatalf("in flight = %d after a double Done", n)
	}
}

func TestGatewayPick(t *testing.T) {
	c, err := New(Config{Gateway: "http://gw.example:8080/"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Direct() {
		t.Fatal("inferred direct mode")
	}
	for _, r := range []Role{RoleEncode, RolePrefill, RoleDecode} {
		if !c.HasRole(r) {
			t.Errorf("HasRole(%s) = false", r)
		}
		tg := mustPick(t, c, r, "http://gw.example:8080")
		if tg.Base != "http://gw.example:8080" || tg.Endpoint != nil || tg.Host != "gw.example" {
			t.Errorf("target = %+v", tg)
		}
		tg.Done(true)
	}
	if c.HasRole("") {
		t.Error("render has a role")
	}
}

func TestNoPoolForRole(t *testing.T) {
	c, _ := newDirect(t, Config{}, 1, RolePrefill, RoleDecode)
	if c.HasRole(RoleEncode) || !c.HasRole(RolePrefill) {
		t.Error("HasRole wrong")
	}
	if _, err := c.Pick(RoleEncode); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("err = %v", err)
	}
	if _, err := c.Pick(""); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("render: err = %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	ep := []Endpoint{{URL: "http://w:1"}}
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings, all required
	}{
		{"nothing set", Config{}, []string{"upstream.mode:"}},
		{"unknown mode", Config{Mode: "mesh", Gateway: "http://g"}, []string{`upstream.mode: must be "gateway" or "direct", got "mesh"`}},
		{"gateway without URL", Config{Mode: "gateway"}, []string{"upstream.gateway: required"}},
		{"bad gateway scheme", Config{Gateway: "ftp://g"}, []string{"upstream.gateway:", "scheme"}},
		{"gateway with query", Config{Gateway: "http://g/?a=1"}, []string{"upstream.gateway:", "query"}},
		{"both gateway and pools", Config{Gateway: "http://g", Pools: map[Role][]Endpoint{RoleDecode: ep}}, []string{"upstream.mode:"}},
		{"pools in gateway mode", Config{Mode: "gateway", Gateway: "http://g", Pools: map[Role][]Endpoint{RoleDecode: ep}}, []string{"upstream.pools: only allowed in direct mode"}},
		{"bad pool names", Config{Pools: map[Role][]Endpoint{"render": ep, "B_x": ep, "decode-70b": ep, RoleDecode: ep}}, []string{"upstream.pools.B_x: a pool name is", "upstream.pools.render: reserved"}},
		{"named pool endpoints", Config{Pools: map[Role][]Endpoint{"decode-70b": {{URL: "http://a:1"}, {URL: "w:1"}}, RoleDecode: ep}}, []string{"upstream.pools.decode-70b[1].url:"}},
		{"bad endpoint", Config{Pools: map[Role][]Endpoint{RolePrefill: {{URL: "http://ok:1"}, {URL: "w:1"}}}}, []string{"upstream.pools.prefill[1].url:"}},
		{"duplicate endpoint", Config{Pools: map[Role][]Endpoint{RolePrefill: {{URL: "http://a:1"}, {URL: "http://a:1/"}}}}, []string{"upstream.pools.prefill[1].url: duplicate"}},
		{"bad bootstrap port", Config{Pools: map[Role][]Endpoint{RolePrefill: {{URL: "http://a:1", BootstrapPort: 70000}}}}, []string{"upstream.pools.prefill[0].bootstrap_port:"}},
		{"bad picker", Config{Gateway: "http://g", Picker: "random"}, []string{"upstream.picker:"}},
		{"negatives, all reported", Config{Gateway: "http://g", FailureThreshold: -1, EjectFor: -1, ShortPromptTokens: -2, PrefixBlockTokens: -1},
			[]string{"upstream.failure_threshold:", "upstream.eject_for:", "upstream.short_prompt_tokens:", "upstream.prefix_block_tokens:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := New(Config{Pools: map[Role][]Endpoint{RoleDecode: {{URL: "http://d:1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.impl.cfg
	if !c.Direct() || cfg.Picker != pickRoundRobin || cfg.FailureThreshold != 3 || cfg.EjectFor != 10*time.Second ||
		cfg.IdleConnTimeout != 4*time.Second || cfg.MaxIdleConnsPerHost != 256 || cfg.PrefixBlockTokens != 16 || cfg.PrefixIndexSize != 10000 {
		t.Errorf("defaults: %+v", cfg)
	}
	rt := c.impl.rt
	if rt.Proxy != nil || rt.IdleConnTimeout != 4*time.Second || rt.MaxIdleConnsPerHost != 256 || rt.ForceAttemptHTTP2 || rt.ResponseHeaderTimeout != 0 {
		t.Errorf("transport: %+v", rt)
	}
}

// InFlight counts legs between Pick and Done, per role, in both modes (the
// async dispatcher's gate reads it).
func TestInFlight(t *testing.T) {
	for _, cfg := range []Config{
		{Mode: "gateway", Gateway: "http://gw:80"},
		{Mode: "direct", Pools: map[Role][]Endpoint{RoleDecode: {{URL: "http://d1:8000"}, {URL: "http://d2:8000"}}, RolePrefill: {{URL: "http://p1:8000"}}}},
	} {
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := c.Pick(RoleDecode)
		b, _ := c.Pick(RoleDecode)
		if n, p := c.InFlight(RoleDecode), c.InFlight(RolePrefill); n != 2 || p != 0 {
			t.Errorf("%s: decode %d prefill %d after two picks", cfg.Mode, n, p)
		}
		a.Done(false)
		b.Done(true)
		b.Done(true) // a second Done is a no-op
		if n := c.InFlight(RoleDecode); n != 0 {
			t.Errorf("%s: decode %d after Done", cfg.Mode, n)
		}
	}
}
