package main

import (
	"fmt"
	"strings"

	"github.com/celflow/celflow/cmd/internal/server/config"
)

// describeRouting is explain's line about how a serve config's upstream
// picks workers (docs/operations.md, Cache-aware routing): the mode, the
// picker and, for cache-aware, its weights, its load source and the truth
// check's bounds. The config is checked as serve checks its upstream
// section; a problem is an error naming its file position.
func describeRouting(path string, getenv func(string) string) (string, error) {
	cfg, ds := config.Read(path, getenv)
	if cfg == nil {
		return "", fmt.Errorf("%s", strings.TrimSpace(ds.Pretty()))
	}
	up, uds := cfg.NewUpstream()
	if up == nil {
		return "", fmt.Errorf("%s", strings.TrimSpace(uds.Pretty()))
	}
	up.CloseIdle()
	u := cfg.Upstream
	if !up.Direct() {
		return "routing: gateway mode: the gateway's endpoint picker chooses each worker", nil
	}
	picker := u.Picker
	if picker == "" {
		picker = "round-robin"
	}
	if picker != "cache-aware" {
		return "routing: direct mode, picker " + picker, nil
	}
	r := u.Routing.WithDefaults()
	load := "celflow's legs in flight and replies being relayed"
	if r.MetricsInterval > 0 {
		load += fmt.Sprintf(" + the workers' running and waiting requests (/metrics, every %s at most)", r.MetricsInterval)
	}
	return fmt.Sprintf("routing: direct mode, picker cache-aware on the decode and named pools: score = %g × cached share of the prompt − %g × load ÷ (largest load + 1), load = %s; "+
		"prefill and encode least-in-flight; truth check: a worker confirming < %g of the predicted cached tokens over %d predicted hits is reported, its KV-event view set aside for %s",
		r.CacheWeight, r.LoadWeight, load, r.MispredictPrecision, r.MispredictWindow, r.DistrustFor), nil
}
