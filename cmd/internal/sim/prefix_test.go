package sim

import (
	"net/http"
	"testing"
)

func prompt(n int) promptInfo {
	p := promptInfo{Tokens: make([]int, n)}
	for i := range p.Tokens {
		p.Tokens[i] = 100 + i
	}
	return p
}

func TestPrefixCacheRule(t *testing.T) {
	c := NewPrefixCache(100)
	long := prompt(40) // prefixes at 16, 32 and 40
	c.Insert(long)
	cases := []struct {
		name    string
		p       promptInfo
		covered int
		hit     bool
	}{
		{"same prompt", long, 40, true},
		{"longer prompt sharing 32 of 60", prompt(60), 32, true},
		{"sharing 32 of 70 is under half", prompt(70), 32, false},
		{"short unseen", prompt(3), 0, false},
		{"same tokens, other image", promptInfo{Tokens: long.Tokens, Items: []item{{Hash: "img", Offset: 20, Length: 2}}}, 16, false},
	}
	for _, tc := range cases {
		if got := c.Covered(tc.p); got != tc.covered {
			t.Errorf("%s: covered %d, want %d", tc.name, got, tc.covered)
		}
		if got := c.Hit(tc.p); got != tc.hit {
			t.Errorf("%s: hit %v, want %v", tc.name, got, tc.hit)
		}
	}
}

func TestPrefixCacheBounded(t *testing.T) {
	c := NewPrefixCache(4)
	for i := range 10 {
		c.Insert(promptInfo{Tokens: []int{i}})
	}
	if c.Len() != 4 {
		t.Fatalf("len %d, want 4", c.Len())
	}
	if c.Hit(promptInfo{Tokens: []int{0}}) || !c.Hit(promptInfo{Tokens: []int{9}}) {
		t.Error("LRU did not evict the oldest")
	}
}

// Prefer: if-available gets 412 unless the prompt's prefix is cached; every
// served decode inserts its prompt.
func TestWorkerConditionalDecode(t *testing.T) {
	w, srv := startWorker(t, Config{Roles: []Role{RoleDecode}})
	body := `{"prompt":"repeat after me","max_tokens":2}`
	status, h, b := post(t, srv.URL+"/v1/completions", body, "EPP-Profile: decode", "Prefer: if-available")
	if status != http.StatusPreconditionFailed || h.Get("X-Sim-Cache") != "miss" {
		t.Fatalf("first conditional decode: %d %s", status, b)
	}
	if w.PrefixCache().Len() != 0 {
		t.Error("a 412 must not insert")
	}
	if status, _, b := post(t, srv.URL+"/v1/completions", body, "EPP-Profile: decode"); status != 200 {
		t.Fatalf("decode: %d %s", status, b)
	}
	status, h, b = post(t, srv.URL+"/v1/completions", body, "EPP-Profile: decode", "Prefer: respond-async, if-available")
	if status != 200 || h.Get("X-Sim-Cache") != "hit" {
		t.Fatalf("repeat conditional decode: %d %s", status, b)
	}
	recs := w.Records().Since(0).Records
	if len(recs) != 3 || recs[0].Cache != "miss" || recs[2].Cache != "hit" || recs[1].Cache != "" {
		t.Errorf("records: %+v", recs)
	}
}
