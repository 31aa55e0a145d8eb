package config

import (
	"strings"
	"testing"
)

// FuzzLoad: the serve-config loader takes any document and any value of
// one CELFLOW_* override and never panics: a Config, or diagnostics with at
// least one error. Seeds: testdata/fuzz/FuzzLoad/ (the full example of
// docs/configuration.md, anchors, overrides of the wrong type, ...).
func FuzzLoad(f *testing.F) {
	f.Add([]byte("server:\n  listen: 127.0.0.1:0\n"), uint8(3), "12")
	f.Add([]byte("{}"), uint8(1), "true")
	f.Fuzz(func(t *testing.T, data []byte, key uint8, val string) {
		ks := Keys()
		env := ks[int(key)%len(ks)].Env
		getenv := func(name string) string {
			if name == env {
				return val
			}
			return ""
		}
		c, ds := Load("fuzz.yaml", data, getenv)
		if c == nil && !ds.HasErrors() {
			t.Fatalf("no config and no error:\n%s", ds)
		}
		if c != nil && ds.HasErrors() {
			t.Fatalf("a config despite errors:\n%s", ds)
		}
		for _, d := range ds {
			if strings.TrimSpace(d.Msg) == "" {
				t.Fatalf("diagnostic without a message: %+v", d)
			}
		}
	})
}
