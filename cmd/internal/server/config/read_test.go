package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Read decodes every section even when some hold errors, and Clean says
// which can be built from; Load and LoadFile refuse the same document.
func TestReadKeepsGoing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "serve.yaml")
	yaml := "server: {read_timeout: 5 parsecs}\nadmission: {max_queue: 3}\nupstream: {gateway: \"http://127.0.0.1:9\"}\nworkflow: wf.yaml\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, ds := Read(path, nil)
	if c == nil || !ds.HasErrors() {
		t.Fatalf("want a config with errors: %v\n%s", c, ds)
	}
	out := ds.String()
	for _, want := range []string{"serve.yaml:1:24: server.read_timeout: invalid duration", "serve.yaml:2:24: admission.max_queue: has no effect without a bound"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for section, clean := range map[string]bool{"server": false, "admission": false, "upstream": true, "workflow": true, "async": true} {
		if c.Clean(section) != clean {
			t.Errorf("Clean(%s) = %v, want %v", section, !clean, clean)
		}
	}
	if c.Upstream.Gateway != "http://127.0.0.1:9" || c.Workflow.Path != filepath.Join(dir, "wf.yaml") {
		t.Errorf("the clean sections were not decoded: %+v %+v", c.Upstream, c.Workflow)
	}
	if c.Server.ReadTimeout != Defaults().Server.ReadTimeout {
		t.Errorf("a bad value keeps its default: %v", c.Server.ReadTimeout)
	}
	if c, lds := LoadFile(path, nil); c != nil || lds.String() != out {
		t.Errorf("LoadFile: %v\n%s", c, lds)
	}
	if c, lds := Load(path, []byte(yaml), nil); c != nil || lds.String() != out {
		t.Errorf("Load: %v\n%s", c, lds)
	}
	c, _ = Read(filepath.Join(dir, "nope.yaml"), nil)
	if c != nil {
		t.Error("an unreadable file has no config")
	}
}

// The defaults come from one place: a config that sets nothing but the
// workflow decodes to Defaults() in every section.
func TestDefaultsOnePlace(t *testing.T) {
	c, diags := load(t, "workflow: /w.yaml\n", nil)
	if c == nil {
		t.Fatal(diags)
	}
	d := Defaults()
	d.Admission.Routes = map[string]int{"chat": 0, "completions": 0, "generate": 0}
	if !reflect.DeepEqual(c.Async, d.Async) || !reflect.DeepEqual(c.Admission, d.Admission) ||
		!reflect.DeepEqual(c.Server, d.Server) || !reflect.DeepEqual(c.Upstream, d.Upstream) || c.Telemetry != d.Telemetry {
		t.Fatalf("decoded %+v\nwant %+v", c, d)
	}
}

// Upstream problems come back at their key, from the error's pointer (no
// text is read back): endpoints of role and named pools, in the file or
// from a variable.
func TestUpstreamDiagnosticPositions(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       string
	}{
		{"role pool endpoint", "upstream:\n  pools:\n    decode: [\"http://127.0.0.1:9\", \"http://\"]\nworkflow: w\n", nil,
			`/etc/celflow/serve.yaml:3:36: upstream.pools.decode[1].url: URL "http://" has no host [config/upstream]`},
		{"named pool endpoint object", "upstream:\n  pools:\n    decode: [\"http://a:1\"]\n    decode-small:\n      - {url: \"http://b:1\"}\n      - {url: \"http://b:1/\"}\n\nworkflow: w\n", nil,
			`/etc/celflow/serve.yaml:6:15: upstream.pools.decode-small[1].url: duplicate endpoint "http://b:1/" [config/upstream]`},
		{"pool from a variable", "workflow: w\n", map[string]string{"CELFLOW_UPSTREAM_POOLS_DECODE": "http://a:1,ftp://b:2"},
			// (The index is printed ["1"]: schema.Doc's path does not know an
			// array the environment set; a schema matter.)
			`CELFLOW_UPSTREAM_POOLS_DECODE: upstream.pools.decode[`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, diags := load(t, tc.yaml, tc.env)
			if c == nil {
				t.Fatal(diags)
			}
			_, ds := c.NewUpstream()
			if !strings.Contains(ds.String(), tc.want) {
				t.Fatalf("want %q in:\n%s", tc.want, ds)
			}
		})
	}
}
