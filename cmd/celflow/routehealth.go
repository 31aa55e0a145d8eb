package main

import (
	"math"

	"github.com/celflow/celflow/connectors/upstream"
)

// routeHealth is GET /health's detail for a generation's upstream client:
// the endpoints the truth check of cache-aware routing reports as
// mispredicting (docs/operations.md, Cache-aware routing), as
//
//	{"status":"ok","routing":{"mispredicting":[{"pool":"decode","endpoint":"http://d1:8000",
//	  "precision":0.12,"cache_source_set_aside":true}]}}
//
// and nothing while none is.
func routeHealth(up *upstream.Client) func() map[string]any {
	if up == nil || !up.Direct() {
		return nil
	}
	return func() map[string]any {
		var bad []map[string]any
		for _, p := range up.RouteStats() {
			for _, e := range p.Endpoints {
				if !e.Mispredicting {
					continue
				}
				m := map[string]any{"pool": p.Pool, "endpoint": e.Endpoint, "cache_source_set_aside": e.Distrusted}
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
}
