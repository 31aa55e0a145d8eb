package main

import (
	"maps"
	"math"
	"strconv"
)

// routeHealth is GET /health's detail for cache-aware routing: the
// endpoints its truth check reports as mispredicting (docs/operations.md,
// Cache-aware routing), each by pool[index] (no address: /health is on the
// client listener; the log line names the URL), as
//
//	{"routing":{"mispredicting":[{"worker":"decode[2]","precision":0.12,"cache_source_set_aside":true}]}}
//
// and nil while none is.
func (g *generation) routeHealth() any {
	if g.up == nil || !g.up.Direct() {
		return nil
	}
	var bad []map[string]any
	for _, p := range g.up.RouteStats() {
		for i, e := range p.Endpoints {
			if !e.Mispredicting {
				continue
			}
			m := map[string]any{"worker": p.Pool + "[" + strconv.Itoa(i) + "]", "cache_source_set_aside": e.Distrusted}
			if !math.IsNaN(e.Precision) {
				m["precision"] = math.Round(e.Precision*1000) / 1000
			}
			bad = append(bad, m)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return map[string]any{"routing": map[string]any{"mispredicting": bad}}
}

// healthDetail is GET /health's whole detail: the KV-event subscribers'
// (kvHealth) and cache-aware routing's (routeHealth), merged; nil while
// neither has anything to say.
func (g *generation) healthDetail() any {
	d := map[string]any{}
	for _, part := range []any{g.kvHealth(), g.routeHealth()} {
		if m, ok := part.(map[string]any); ok {
			maps.Copy(d, m)
		}
	}
	if len(d) == 0 {
		return nil
	}
	return d
}
