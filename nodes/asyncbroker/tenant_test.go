package asyncbroker

import (
	"net/http"
	"testing"
)

// The tenant scopes every result, so a second value beside the one the edge
// set is refused rather than read first-wins (found in review: a client
// adding x-llm-d-tenant next to the gateway's X-Team read another tenant's
// result).
func TestTenantOf(t *testing.T) {
	const k, alias = "X-Llm-D-Tenant", "X-Team"
	for _, tc := range []struct {
		name string
		h    http.Header
		want string
		ok   bool
	}{
		{"none", http.Header{}, "", true},
		{"primary", http.Header{k: {"a"}}, "a", true},
		{"alias", http.Header{alias: {"b"}}, "b", true},
		{"both spellings", http.Header{k: {"a"}, alias: {"b"}}, "", false},
		{"two values", http.Header{k: {"a", "b"}}, "", false},
		{"two alias values", http.Header{alias: {"a", "b"}}, "", false},
	} {
		got, ok := tenantOf(tc.h, k, alias)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %q %v, want %q %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
