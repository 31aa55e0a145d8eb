package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// The probe answers what a request would report as cached_tokens, and
// does not change the cache: the LRU order after probes is the order
// without them.
func TestCacheProbe(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, PrefixCacheSize: 4, BlockSize: 4})
	ids := func(n, base int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprint(base + i)
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	probe := func(tokens string) map[string]int {
		t.Helper()
		code, _, b := post(t, srv.URL+"/sim/cache/probe", `{"token_ids":`+tokens+`}`)
		var m map[string]int
		if code != 200 || json.Unmarshal(b, &m) != nil {
			t.Fatalf("probe: %d %s", code, b)
		}
		return m
	}
	gen := func(tokens string) int {
		t.Helper()
		code, _, b := post(t, srv.URL+"/inference/v1/generate", `{"token_ids":`+tokens+`,"sampling_params":{"max_tokens":1}}`)
		if code != 200 {
			t.Fatalf("generate: %d %s", code, b)
		}
		var r struct {
			Usage struct {
				D struct {
					C int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		_ = json.Unmarshal(b, &r)
		return r.Usage.D.C
	}
	a, b := ids(9, 100), ids(9, 200) // two blocks each (8 cacheable tokens)
	if m := probe(a); m["cached_tokens"] != 0 || m["block_size"] != 4 || m["capacity"] != 4 || m["blocks"] != 0 {
		t.Fatalf("cold probe %v", m)
	}
	gen(a)
	gen(b) // the cache is full: a's 2 blocks, then b's 2
	if m := probe(a); m["cached_tokens"] != 8 || m["blocks"] != 4 {
		t.Fatalf("probe after a, b: %v", m)
	}
	// Had the probe touched a, a third prompt would evict b; it evicts a.
	gen(ids(9, 300))
	if got := probe(a)["cached_tokens"]; got != 0 {
		t.Errorf("a: %d cached after a third prompt, want 0 (the probe must not have refreshed it)", got)
	}
	if got, want := probe(b)["cached_tokens"], gen(b); got != 8 || want != 8 {
		t.Errorf("b: probe %d, request reported %d, want 8 both", got, want)
	}
	if code, _, _ := post(t, srv.URL+"/sim/cache/probe", `{"token_ids":"x"}`); code != 400 {
		t.Errorf("a bad body: %d, want 400", code)
	}
}
