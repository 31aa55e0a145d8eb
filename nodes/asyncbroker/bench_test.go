package asyncbroker

import (
	"context"
	"net/http"
	"testing"

	"github.com/celflow/celflow/engine"
)

// BenchmarkRunNoHeader is the cost an online request without the mode
// header pays for the node: two header map reads and a context lookup.
func BenchmarkRunNoHeader(b *testing.B) {
	cfg, err := parseParams(nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	n := &Node{cfg: cfg}
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer x"}, "X-Request-Id": {"abc"}}
	req := &engine.Request{ID: "abc", Route: engine.RouteChat, Header: h, Body: []byte(`{"model":"m"}`), Model: "m"}
	run := engine.NewRun(context.Background(), req, nil)
	x := &engine.Exec{Run: run, NodeID: "async", Attempt: 1, Index: -1}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if res := n.Run(ctx, x); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}
