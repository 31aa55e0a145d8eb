package leg_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

// Issue 10: a parsed leg whose worker sends headers and then stalls or
// trickles fails with KindUpstreamTimeout (504 upstream_timeout, which the
// default retry rule retries), not when the client gives up.
func TestReadBodyBounds(t *testing.T) {
	stall := func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	trickle := func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
		w.WriteHeader(200)
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			w.Write([]byte(" "))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tk.C:
			}
		}
	}
	for _, tc := range []struct {
		name   string
		handle func(http.ResponseWriter, *http.Request, legtest.Call)
		bounds leg.BodyBounds
		msg    string
	}{
		{"stall after headers", stall, leg.BodyBounds{Idle: 30 * time.Millisecond}, "upstream reply body stalled: no byte for 30ms"},
		{"trickle", trickle, leg.BodyBounds{Idle: time.Second, Body: 50 * time.Millisecond}, "upstream reply body not complete within 50ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := legtest.NewWorker(t, tc.handle)
			run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
			x := legtest.Exec(run, "prefill")
			l := leg.NewLeg(x, upstream.RolePrefill, "/v1/chat/completions", jsonb.Raw([]byte(`{}`)), time.Second)
			tc.bounds.Apply(l)
			resp, e := leg.Send(context.Background(), x, legtest.Gateway(t, w.URL), w.URL, l)
			if e != nil {
				t.Fatal(e)
			}
			_, e = leg.ReadJSON(x, resp, 1<<20)
			if e == nil || e.Kind != engine.KindUpstreamTimeout || e.Msg != tc.msg || e.HTTPStatus() != 504 || e.Code() != "upstream_timeout" {
				t.Fatalf("err %v", e)
			}
		})
	}
}

// The params: defaults, 0 = off, and errors at their pointers.
func TestBodyParams(t *testing.T) {
	b, errs := leg.BodyParams{}.Parse(5*time.Second, 30*time.Second)
	if len(errs) != 0 || b != (leg.BodyBounds{Idle: 5 * time.Second, Body: 30 * time.Second}) {
		t.Fatalf("defaults: %+v %v", b, errs)
	}
	b, errs = leg.BodyParams{IdleTimeout: "0", BodyTimeout: "2m"}.Parse(5*time.Second, 30*time.Second)
	if len(errs) != 0 || b != (leg.BodyBounds{Body: 2 * time.Minute}) {
		t.Fatalf("set: %+v %v", b, errs)
	}
	_, errs = leg.BodyParams{IdleTimeout: "soon", BodyTimeout: "-1s"}.Parse(0, 0)
	if len(errs) != 2 || errs[0].(*engine.ParamError).Path != "/idle_timeout" || errs[1].(*engine.ParamError).Path != "/body_timeout" {
		t.Fatalf("errors: %v", errs)
	}
}
