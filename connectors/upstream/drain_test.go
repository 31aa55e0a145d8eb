package upstream

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// DrainSignal reads a worker's "I am going away": a 503 with Retry-After
// (capped), or a 503 with Connection: close; anything else is not one.
func TestDrainSignal(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		close  bool
		want   time.Duration
		ok     bool
	}{
		{"503 Retry-After seconds", 503, http.Header{"Retry-After": {"7"}}, false, 7 * time.Second, true},
		{"503 Retry-After date", 503, http.Header{"Retry-After": {now.Add(3 * time.Second).UTC().Format(http.TimeFormat)}}, false, 3 * time.Second, true},
		{"503 Retry-After over the cap", 503, http.Header{"Retry-After": {"120"}}, false, MaxDrainFor, true},
		{"503 Connection: close", 503, nil, true, DefaultDrainFor, true},
		{"503 Retry-After and close", 503, http.Header{"Retry-After": {"2"}}, true, 2 * time.Second, true},
		{"503 alone is an overloaded worker", 503, nil, false, 0, false},
		{"503 malformed Retry-After", 503, http.Header{"Retry-After": {"soon"}}, false, 0, false},
		{"429 Retry-After is not draining", 429, http.Header{"Retry-After": {"5"}}, false, 0, false},
		{"200 close is not draining", 200, nil, true, 0, false},
		{"502 close", 502, nil, true, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.status, Header: tc.header, Close: tc.close}
			if resp.Header == nil {
				resp.Header = http.Header{}
			}
			d, ok := DrainSignal(resp, now)
			if d != tc.want || ok != tc.ok {
				t.Fatalf("DrainSignal = %v %v, want %v %v", d, ok, tc.want, tc.ok)
			}
		})
	}
	if _, ok := DrainSignal(nil, now); ok {
		t.Fatal("no response is no drain signal")
	}
}

// Issue 19: a draining endpoint gets no new legs until its drain elapses
// or a leg picked after the signal is answered well; it is not a failure
// (no ejection, the streak is untouched), Health counts it as draining and
// not healthy, and the hook hears one Draining event.
func TestDrainingEndpoint(t *testing.T) {
	c, clk := newDirect(t, Config{FailureThreshold: 2, EjectFor: 10 * time.Second}, 3, RoleDecode)
	var mu sync.Mutex
	var evs []HealthEvent
	c.SetHealthHook(func(ev HealthEvent) { mu.Lock(); evs = append(evs, ev); mu.Unlock() })
	const d0 = "http://decode-0:8000"

	// A leg in flight on decode-0 before the signal.
	inflight := mustPick(t, c, RoleDecode, "http://decode-1:8000/", "http://decode-2:8000/")
	// One failure on decode-0: its streak must survive the drain.
	f := mustPick(t, c, RoleDecode, "http://decode-1:8000/", "http://decode-2:8000/")
	f.Done(true)
	sig := mustPick(t, c, RoleDecode, "http://decode-1:8000/", "http://decode-2:8000/")
	if sig.Base != d0 {
		t.Fatalf("setup: picked %s", sig.Base)
	}
	sig.Drain(20 * time.Second)
	sig.Drain(20 * time.Second) // once only
	if n := c.impl.pools[2].eps[0].failures.Load(); n != 1 {
		t.Fatalf("streak %d after the drain, want 1: a drain neither counts nor resets", n)
	}
	if h := c.Health(); h[0] != (PoolHealth{RoleDecode, 3, 2, 1}) {
		t.Fatalf("health %+v", h)
	}
	if len(evs) != 1 || !evs[0].Draining || evs[0].Ejected || evs[0].Endpoint != "http://decode-0:8000/" || evs[0].For != 20*time.Second {
		t.Fatalf("events %+v", evs)
	}
	if got := pickedSet(t, c, RoleDecode, 30); got[d0] {
		t.Fatalf("a draining endpoint got a new leg: %v", got)
	}
	// The leg in flight before the signal ends well: that does not end the
	// drain (it was accepted before the worker began to drain).
	inflight.Done(false)
	if got := pickedSet(t, c, RoleDecode, 30); got[d0] {
		t.Fatalf("an old leg's success ended the drain: %v", got)
	}
	// When every other endpoint is draining too, a draining one still
	// serves (choose's last pass): a leg picked now, answered well, ends
	// decode-0's drain.
	for _, b := range []string{"http://decode-1:8000/", "http://decode-2:8000/"} {
		tg := mustPick(t, c, RoleDecode, other3(b)...)
		if tg.Base+"/" != b {
			t.Fatalf("picked %s, want %s", tg.Base, b)
		}
		tg.Drain(5 * time.Second)
	}
	if h := c.Health(); h[0].Healthy != 0 || h[0].Draining != 3 {
		t.Fatalf("health %+v", h)
	}
	var back *Target
	for range 3 {
		tg := mustPick(t, c, RoleDecode)
		if tg.Base == d0 {
			back = tg
			continue
		}
		tg.Release()
	}
	if back == nil {
		t.Fatal("all draining: decode-0 was never picked")
	}
	back.Done(false)
	if h := c.Health(); h[0].Draining != 2 || h[0].Healthy != 1 {
		t.Fatalf("a leg picked during the drain answered well; health %+v", h)
	}
	// The others' drains elapse.
	clk.t = clk.t.Add(5 * time.Second)
	if h := c.Health(); h[0] != (PoolHealth{RoleDecode, 3, 3, 0}) {
		t.Fatalf("health after the drains elapsed %+v", h)
	}
	if n := c.InFlight(RoleDecode); n != 0 {
		t.Fatalf("in flight %d after every target was released", n)
	}
}

// Release gives a target back without a verdict: a failure streak neither
// grows nor resets.
func TestRelease(t *testing.T) {
	c, _ := newDirect(t, Config{FailureThreshold: 2}, 2, RolePrefill)
	tg := mustPick(t, c, RolePrefill, "http://prefill-1:8000")
	tg.Done(true)
	tg = mustPick(t, c, RolePrefill, "http://prefill-1:8000")
	tg.Release()
	tg.Release()
	if n := c.impl.pools[1].eps[0].failures.Load(); n != 1 {
		t.Fatalf("streak %d after a release, want 1", n)
	}
	if n := c.InFlight(RolePrefill); n != 0 {
		t.Fatalf("in flight %d", n)
	}
	gw := gatewayClient(t, "http://gw:8000")
	g, _ := gw.Pick(RoleDecode)
	g.Release()
	g2, _ := gw.Pick(RoleDecode)
	g2.Drain(time.Second)
	if n := gw.InFlight(RoleDecode); n != 0 {
		t.Fatalf("gateway in flight %d", n)
	}
}

func other3(keep string) []string {
	var out []string
	for _, b := range []string{"http://decode-0:8000/", "http://decode-1:8000/", "http://decode-2:8000/"} {
		if b != keep {
			out = append(out, b)
		}
	}
	return out
}
