package config

import (
	"strings"
	"testing"
	"time"
)

// upstream.routing: the file's keys and the environment's reach the
// upstream config; a bad value is placed in the file (schema) or named by
// its variable, as every other key.
func TestRoutingKeys(t *testing.T) {
	const yaml = `upstream:
  pools: {decode: ["http://127.0.0.1:9"]}
  picker: cache-aware
  routing: {cache_weight: 2, load_weight: 0.5, metrics_interval: 250ms, mispredict_window: 8, mispredict_precision: 0.9, distrust_for: 1m}
workflow: w
`
	c, diags := load(t, yaml, map[string]string{"CELFLOW_UPSTREAM_ROUTING_METRICS_TIMEOUT": "300ms", "CELFLOW_UPSTREAM_ROUTING_LOAD_WEIGHT": "0.25"})
	if c == nil {
		t.Fatal(diags)
	}
	r := c.Upstream.Routing
	if c.Upstream.Picker != "cache-aware" || r.CacheWeight != 2 || r.LoadWeight != 0.25 || r.MetricsInterval != 250*time.Millisecond ||
		r.MetricsTimeout != 300*time.Millisecond || r.MispredictWindow != 8 || r.MispredictPrecision != 0.9 || r.DistrustFor != time.Minute {
		t.Fatalf("routing %+v picker %q", r, c.Upstream.Picker)
	}
	if up, ds := c.NewUpstream(); up == nil || len(ds) != 0 {
		t.Fatalf("%s", ds)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"upstream:\n  routing: {cache_weight: -1}\nworkflow: w\n", "/etc/celflow/serve.yaml:2:27: upstream.routing.cache_weight: "},
		{"upstream:\n  routing:\n    mispredict_precision: 0\nworkflow: w\n", "/etc/celflow/serve.yaml:3:27: upstream.routing.mispredict_precision: "},
		{"upstream:\n  routing: {mispredict_window: 0}\nworkflow: w\n", "/etc/celflow/serve.yaml:2:32: upstream.routing.mispredict_window: "},
		{"upstream:\n  picker: cache\nworkflow: w\n", "/etc/celflow/serve.yaml:2:11: upstream.picker: "},
	} {
		if c, diags := load(t, tc.yaml, nil); c != nil || !strings.HasPrefix(diags, tc.want) {
			t.Errorf("%q:\n got %s\nwant %s…", tc.yaml, diags, tc.want)
		}
	}
	// One weight set keeps the other's default; 0 is a weight like another.
	if c, diags := load(t, "upstream: {routing: {load_weight: 0}}\nworkflow: w\n", nil); c == nil || c.Upstream.Routing.CacheWeight != 1 || c.Upstream.Routing.LoadWeight != 0 {
		t.Errorf("load_weight 0 alone: %+v %s", c, diags)
	}
	if c, diags := load(t, "upstream: {routing: {cache_weight: 3}}\nworkflow: w\n", nil); c == nil || c.Upstream.Routing.CacheWeight != 3 || c.Upstream.Routing.LoadWeight != 0.5 {
		t.Errorf("cache_weight 3 alone: %+v %s", c, diags)
	}
	if c, diags := load(t, "workflow: w\n", map[string]string{"CELFLOW_UPSTREAM_ROUTING_CACHE_WEIGHT": "lots"}); c != nil ||
		!strings.HasPrefix(diags, "CELFLOW_UPSTREAM_ROUTING_CACHE_WEIGHT: upstream.routing.cache_weight: ") {
		t.Errorf("env: %s", diags)
	}
}
