package metrics

import (
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/engine"
)

// RouteUnmatched labels requests no client route matched (404, 405 on
// other paths): the raw path never becomes a label.
const RouteUnmatched = "unmatched"

// RouteLabel is the route label of a client route: its path
// ("/v1/chat/completions"; the server span's http.route), or RouteUnmatched.
func RouteLabel(r engine.Route) string {
	if p := r.Path(); p != "" {
		return p
	}
	return RouteUnmatched
}

// Observe records one finished request as the front reports it; it is the
// front's Options.Observe. It counts the request with the front's own
// duration (the whole reply, streams included), derives the node,
// fan-out, conditional-decode, fallback and abandoned-prefill series from
// the report, and records the time to first byte of streamed replies.
func (m *Metrics) Observe(o *front.Observation) {
	route := RouteLabel(o.Route)
	m.observe(route, o.Status, o.Duration, o.Report, o.Run)
	if o.Stream && o.FirstByte > 0 {
		m.ObserveTTFT(route, o.FirstByte)
	}
}

// Compile-time check that Observe fits the front's hook.
var _ = front.Options{Observe: (*Metrics)(nil).Observe, InFlight: (*Metrics)(nil).InFlight}
