package leg_test

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

// deadURL is a 127.0.0.1 address nothing listens on (connection refused).
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// Issue 19: a leg that fails before its first response byte is sent again,
// the same bytes, to an endpoint it has not tried (direct mode), up to
// Reroute more times; a 4xx, another 5xx, a time-to-first-byte timeout or a
// 2xx is never re-sent; a leg the node aimed itself (Target) is not either.
func TestCallRerouteDirect(t *testing.T) {
	status := func(code int, h ...string) func(http.ResponseWriter, *http.Request, legtest.Call) {
		return func(w http.ResponseWriter, r *http.Request, c legtest.Call) {
			for i := 0; i+1 < len(h); i += 2 {
				w.Header().Set(h[i], h[i+1])
			}
			legtest.JSON(code, `{"error":{"message":"no"}}`)(w, r, c)
		}
	}
	slow := func(w http.ResponseWriter, r *http.Request, c legtest.Call) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	for _, tc := range []struct {
		name    string
		bad     func(http.ResponseWriter, *http.Request, legtest.Call) // nil: a dead endpoint
		reroute int
		ttfb    time.Duration
		aimed   bool
		want    int // status of the answer the call returns (0: none)
		legsBad int // legs the bad endpoint took
		legsOK  int
	}{
		{name: "refused, re-sent", reroute: 2, want: 200, legsOK: 1},
		{name: "refused, no reroute", reroute: 0, want: 0},
		{name: "503, re-sent", bad: status(503), reroute: 1, want: 200, legsBad: 1, legsOK: 1},
		{name: "503 draining, re-sent", bad: status(503, "Retry-After", "30"), reroute: 1, want: 200, legsBad: 1, legsOK: 1},
		{name: "400 is the request's", bad: status(400), reroute: 2, want: 400, legsBad: 1},
		{name: "500 may have started the work", bad: status(500), reroute: 2, want: 500, legsBad: 1},
		{name: "502 from a worker", bad: status(502), reroute: 2, want: 502, legsBad: 1},
		{name: "ttfb timeout", bad: slow, reroute: 2, ttfb: 200 * time.Millisecond, want: 0, legsBad: 1},
		{name: "aimed leg", bad: status(503), reroute: 2, aimed: true, want: 503, legsBad: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := legtest.NewWorker(t, legtest.JSON(200, `{"ok":true}`))
			badURL := deadURL(t)
			var bad *legtest.Worker
			if tc.bad != nil {
				bad = legtest.NewWorker(t, tc.bad)
				badURL = bad.URL
			}
			c := legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{
				upstream.RoleDecode: {{URL: badURL}, {URL: good.URL}},
			}})
			run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
			x := legtest.Exec(run, "decode")
			cl := leg.Call{Role: upstream.RoleDecode, Path: "/v1/chat/completions", Body: jsonb.Raw([]byte(`{"kv_transfer_params":{"remote_request_id":"rr-1"}}`)),
				Reroute: tc.reroute, TTFB: tc.ttfb}
			if tc.aimed {
				tg, err := c.Pick(upstream.RoleDecode)
				if err != nil || tg.Base != badURL {
					t.Fatalf("setup: %v %v", tg, err)
				}
				cl.Target = tg
			} else {
				// Round-robin starts at the bad endpoint.
				tg, _ := c.Pick(upstream.RoleDecode)
				tg.Release()
				tg, _ = c.Pick(upstream.RoleDecode)
				tg.Release()
			}
			var res engine.Result
			resp, target, e := cl.Send(context.Background(), x, c, &res)
			if resp != nil && e == nil {
				resp.Body.Close()
			}
			got := 0
			if resp != nil {
				got = resp.StatusCode
			}
			if got != tc.want || res.HTTPStatus != tc.want || (tc.want == 200) != (e == nil) || target == nil {
				t.Fatalf("status %d (result %d), err %v, target %v; want %d", got, res.HTTPStatus, e, target, tc.want)
			}
			if bad != nil && len(bad.Calls()) != tc.legsBad {
				t.Errorf("bad endpoint took %d legs, want %d", len(bad.Calls()), tc.legsBad)
			}
			calls := good.Calls()
			if len(calls) != tc.legsOK {
				t.Fatalf("good endpoint took %d legs, want %d", len(calls), tc.legsOK)
			}
			if tc.legsOK == 1 {
				if string(calls[0].Body) != `{"kv_transfer_params":{"remote_request_id":"rr-1"}}` {
					t.Errorf("re-sent body %s: the same bytes, the same KV hand-off", calls[0].Body)
				}
				if res.Attrs["celflow.reroutes"] != 1 || res.Attrs["celflow.endpoint"] != good.URL {
					t.Errorf("attrs %v", res.Attrs)
				}
			}
			if n := c.InFlight(upstream.RoleDecode); n != 0 {
				t.Errorf("%d legs still in flight", n)
			}
		})
	}
}

// Direct mode stops when every endpoint was tried, however large Reroute,
// and then goes to the fallback pool with Reroute more attempts there.
func TestCallRerouteExhaustsThenFallback(t *testing.T) {
	var spareLegs atomic.Int32
	spare := legtest.NewWorker(t, func(w http.ResponseWriter, r *http.Request, c legtest.Call) {
		spareLegs.Add(1)
		legtest.JSON(200, `{"ok":true}`)(w, r, c)
	})
	busy := legtest.NewWorker(t, legtest.JSON(503, `{}`))
	pools := map[upstream.Role][]upstream.Endpoint{
		upstream.RoleDecode: {{URL: deadURL(t)}, {URL: busy.URL}},
		"decode-spare":      {{URL: deadURL(t)}, {URL: spare.URL}},
	}
	for _, tc := range []struct {
		name     string
		fallback string
		want     int
		legs     int32
	}{
		{"no fallback", "", 503, 0},
		{"fallback", "decode-spare", 200, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spareLegs.Store(0)
			c := legtest.Direct(t, upstream.Config{Pools: pools})
			run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
			x := legtest.Exec(run, "decode")
			var res engine.Result
			resp, _, e := leg.Call{Role: upstream.RoleDecode, Path: "/v1/chat/completions", Body: jsonb.Raw([]byte(`{}`)),
				Reroute: 5, Fallback: tc.fallback}.Send(context.Background(), x, c, &res)
			if resp == nil || resp.StatusCode != tc.want {
				t.Fatalf("resp %v err %v, want %d", resp, e, tc.want)
			}
			if e == nil {
				resp.Body.Close()
			}
			if spareLegs.Load() != tc.legs {
				t.Fatalf("spare took %d legs, want %d", spareLegs.Load(), tc.legs)
			}
			if tc.fallback != "" && res.Attrs["celflow.fallback_pool"] != tc.fallback {
				t.Errorf("attrs %v", res.Attrs)
			}
			if n := c.InFlight(upstream.RoleDecode); n != 0 {
				t.Errorf("%d legs still in flight", n)
			}
		})
	}
}

// Gateway mode: the gateway is asked again (it picks again) up to Reroute
// more times on a 503 or a 502 (it could not reach the pod it picked); a
// fallback pool goes to the gateway as X-Celflow-Pool.
func TestCallRerouteGateway(t *testing.T) {
	var n atomic.Int32
	gw := legtest.NewWorker(t, func(w http.ResponseWriter, r *http.Request, c legtest.Call) {
		switch n.Add(1) {
		case 1:
			legtest.JSON(502, `{"error":{"message":"gateway: upstream unreachable"}}`)(w, r, c)
		case 2:
			w.Header().Set("Retry-After", "5")
			legtest.JSON(503, `{}`)(w, r, c)
		default:
			legtest.JSON(200, `{"ok":true}`)(w, r, c)
		}
	})
	for _, tc := range []struct {
		name     string
		reroute  int
		fallback string
		want     int
		pools    []string
	}{
		{"re-asked twice", 2, "", 200, []string{"", "", ""}},
		{"re-asked once, gives up", 1, "", 503, []string{"", ""}},
		{"then the fallback pool", 1, "decode-spare", 200, []string{"", "", "decode-spare"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.Store(0)
			before := len(gw.Calls())
			c := legtest.Gateway(t, gw.URL)
			run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
			x := legtest.Exec(run, "decode")
			var res engine.Result
			resp, _, e := leg.Call{Role: upstream.RoleDecode, Path: "/v1/chat/completions", Body: jsonb.Raw([]byte(`{}`)),
				Reroute: tc.reroute, Fallback: tc.fallback}.Send(context.Background(), x, c, &res)
			if resp == nil || resp.StatusCode != tc.want {
				t.Fatalf("resp %v err %v, want %d", resp, e, tc.want)
			}
			if e == nil {
				resp.Body.Close()
			}
			calls := gw.Calls()[before:]
			if len(calls) != len(tc.pools) {
				t.Fatalf("%d legs, want %d", len(calls), len(tc.pools))
			}
			for i, cl := range calls {
				if got := cl.Header.Get(upstream.PoolHeader); got != tc.pools[i] || cl.Header.Get("Epp-Profile") != "decode" {
					t.Errorf("leg %d: pool %q profile %q, want pool %q", i, got, cl.Header.Get("Epp-Profile"), tc.pools[i])
				}
			}
			if n := c.InFlight(upstream.RoleDecode); n != 0 {
				t.Errorf("%d legs still in flight", n)
			}
		})
	}
}

// Issue 19, draining: a 503 with Retry-After drains its endpoint (no new
// legs, no failure counted), whichever node sent the leg.
func TestCallDrainSignal(t *testing.T) {
	draining := legtest.NewWorker(t, func(w http.ResponseWriter, r *http.Request, c legtest.Call) {
		w.Header().Set("Retry-After", "30")
		legtest.JSON(503, `{}`)(w, r, c)
	})
	good := legtest.NewWorker(t, nil)
	c := legtest.Direct(t, upstream.Config{FailureThreshold: 1, Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RolePrefill: {{URL: draining.URL}, {URL: good.URL}},
	}})
	var events []upstream.HealthEvent
	c.SetHealthHook(func(ev upstream.HealthEvent) { events = append(events, ev) })
	send := func() (*http.Response, *engine.Error) {
		run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
		var res engine.Result
		resp, _, e := leg.Call{Role: upstream.RolePrefill, Path: "/v1/chat/completions", Body: jsonb.Raw([]byte(`{}`))}.
			Send(context.Background(), legtest.Exec(run, "prefill"), c, &res)
		if resp != nil && e == nil {
			resp.Body.Close()
		}
		return resp, e
	}
	if resp, e := send(); resp == nil || resp.StatusCode != 503 || e == nil || e.RetryAfter != 30 {
		t.Fatalf("first leg: %v %v", resp, e)
	}
	for range 10 {
		if resp, e := send(); e != nil || resp.StatusCode != 200 {
			t.Fatalf("leg after the drain signal: %v %v", resp, e)
		}
	}
	if n := len(draining.Calls()); n != 1 {
		t.Fatalf("the draining worker took %d legs, want 1", n)
	}
	if len(events) != 1 || !events[0].Draining || events[0].Ejected || events[0].For != 30*time.Second {
		t.Fatalf("events %+v (a drain, not an ejection, though the failure threshold is 1)", events)
	}
	if h := c.Health(); len(h) != 1 || h[0].Draining != 1 || h[0].Healthy != 1 {
		t.Fatalf("health %+v", h)
	}
}
