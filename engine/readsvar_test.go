package engine

import "testing"

// An expression reading a null var is not compiled (the var's error says
// why); one reading another var of a longer name is.
func TestReadsVar(t *testing.T) {
	for _, c := range []struct {
		src  string
		want bool
	}{
		{"x in config.tenants", true},
		{`config["tenants"].size() > 0`, true},
		{"config.tenants_gold == 1", false},
		{"config.tenant == 1", false},
		{"size(config.tenants)>0", true},
		{"request.model == 'config.tenants'", true}, // conservative: a literal naming it too
	} {
		if got := readsVar(c.src, "tenants"); got != c.want {
			t.Errorf("%q: got %v", c.src, got)
		}
	}
}
