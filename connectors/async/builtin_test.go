package async

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/connectors/async/redistest"
)

func newBuiltin(t *testing.T, cfg BuiltinConfig) *Builtin {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	b := NewBuiltin(rdb, cfg)
	t.Cleanup(func() { b.Close() })
	if err := b.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func job(id, body string) *Job {
	return &Job{Tenant: "t1", ID: id, Queue: "default", Path: "/v1/chat/completions", Body: []byte(body),
		Created: time.Now(), Deadline: time.Now().Add(time.Hour), Headers: map[string]string{"traceparent": "00-x"}}
}

func TestSubmitIdempotency(t *testing.T) {
	ctx := context.Background()
	b := newBuiltin(t, BuiltinConfig{TenantBacklog: 2})
	cases := []struct {
		name string
		j    *Job
		want Outcome
	}{
		{"new", job("a", `{"model":"m"}`), Created},
		{"same body reattaches", job("a", `{"model":"m"}`), Reattached},
		{"other body conflicts", job("a", `{"model":"other"}`), Conflict},
		{"second fits", job("b", `{}`), Created},
		{"tenant bound", job("c", `{}`), FullTenant},
	}
	for _, c := range cases {
		got, err := b.Submit(ctx, c.j)
		if err != nil || got.Outcome != c.want {
			t.Errorf("%s: got %+v, %v; want outcome %d", c.name, got, err, c.want)
		}
	}
}

func TestClaimFinishFetchGrace(t *testing.T) {
	ctx := context.Background()
	b := newBuiltin(t, BuiltinConfig{Grace: 200 * time.Millisecond})
	if _, err := b.Submit(ctx, job("r1", `{"model":"m"}`)); err != nil {
		t.Fatal(err)
	}
	if r, _ := b.Fetch(ctx, "t1", "r1"); r.State != StateQueued {
		t.Fatalf("state %q, want queued", r.State)
	}
	ds, _, err := b.Claim(ctx, "c1", 10, 0)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	d := ds[0]
	if string(d.Body) != `{"model":"m"}` || d.Headers["traceparent"] != "00-x" || d.Deliveries != 1 {
		t.Fatalf("delivery %+v", d)
	}
	if r, _ := b.Fetch(ctx, "t1", "r1"); r.State != StateInProgress {
		t.Fatalf("state %q, want in_progress", r.State)
	}
	// A stale claimer (another consumer name) is fenced.
	stale := *d
	stale.consumer = "c2"
	if ok, err := b.Finish(ctx, &stale, Result{Status: 200, Body: []byte("stale")}); ok || err != nil {
		t.Fatalf("stale finish: %v %v", ok, err)
	}
	if ok, err := b.Finish(ctx, d, Result{Status: 200, Body: []byte(`{"ok":1}`)}); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	if ok, _ := b.Finish(ctx, d, Result{Status: 500}); ok {
		t.Fatal("second finish was accepted")
	}
	r, _ := b.Fetch(ctx, "t1", "r1")
	if r.State != StateDone || r.Result.Status != 200 || string(r.Result.Body) != `{"ok":1}` {
		t.Fatalf("record %+v", r)
	}
	if ttl := b.rdb.PTTL(ctx, b.jobKey("t1", "r1")).Val(); ttl > 200*time.Millisecond {
		t.Fatalf("ttl after first fetch %v, want ≤ grace", ttl)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if r, _ := b.Fetch(ctx, "t1", "r1"); r.State == StateUnknown {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("result outlived the grace")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := b.rdb.Get(ctx, b.tenantKey("t1")).Val(); n != "0" {
		t.Fatalf("tenant backlog %s after finish", n)
	}
}

func TestRedeliveryAndDeadLetter(t *testing.T) {
	ctx := context.Background()
	b := newBuiltin(t, BuiltinConfig{Lease: 40 * time.Millisecond, MaxDeliveries: 2})
	if _, err := b.Submit(ctx, job("p", `{}`)); err != nil {
		t.Fatal(err)
	}
	claim := func(consumer string) []*Delivery {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ds, st, err := b.Claim(ctx, consumer, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) > 0 || st.DeadLettered > 0 {
				return ds
			}
		}
		t.Fatal("nothing claimed")
		return nil
	}
	first := claim("a")[0]
	second := claim("b") // a stopped renewing: redelivered to b
	if len(second) != 1 || !second[0].Redelivered || second[0].Deliveries != 2 {
		t.Fatalf("redelivery %+v", second)
	}
	if ok, _ := b.Finish(ctx, first, Result{Status: 200}); ok {
		t.Fatal("the first claimer's late finish was not fenced")
	}
	if third := claim("c"); len(third) != 0 {
		t.Fatalf("third delivery ran: %+v", third[0])
	}
	r, _ := b.Fetch(ctx, "t1", "p")
	if r.State != StateDone || r.Result.Code != CodeDeadLettered {
		t.Fatalf("record %+v", r)
	}
	if n := b.rdb.XLen(ctx, b.DeadLetters()).Val(); n != 1 {
		t.Fatalf("dead letters %d", n)
	}
}

func TestCancel(t *testing.T) {
	ctx := context.Background()
	b := newBuiltin(t, BuiltinConfig{})
	for _, id := range []string{"q1", "q2", "r1"} {
		if _, err := b.Submit(ctx, job(id, `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	_ = b.Cancel(ctx, "t1", "q1", false) // DELETE of a queued one: gone
	_ = b.Cancel(ctx, "t1", "q2", true)  // a wait client left: a record
	if r, _ := b.Fetch(ctx, "t1", "q1"); r.State != StateUnknown {
		t.Fatalf("q1 %+v", r)
	}
	if r, _ := b.Fetch(ctx, "t1", "q2"); r.Result.Code != CodeCancelled {
		t.Fatalf("q2 %+v", r)
	}
	got := make(chan string, 1)
	b.OnCancel(func(m string) { got <- m })
	ds, _, _ := b.Claim(ctx, "c", 10, 0)
	if len(ds) != 1 || ds[0].ID != "r1" {
		t.Fatalf("claimed %v", ds)
	}
	_ = b.Cancel(ctx, "t1", "r1", false)
	select {
	case m := <-got:
		if m != "t1:r1" {
			t.Fatalf("cancel event %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no cancel event")
	}
	if _, cancel, _ := b.Renew(ctx, ds[0]); !cancel {
		t.Fatal("renew did not report the cancel")
	}
	if ok, _ := b.Finish(ctx, ds[0], Result{Code: CodeCancelled}); !ok {
		t.Fatal("finish after cancel")
	}
	if r, _ := b.Fetch(ctx, "t1", "r1"); r.State != StateUnknown {
		t.Fatalf("deleted running request still visible: %+v", r)
	}
	if n := b.rdb.Get(ctx, b.tenantKey("t1")).Val(); n != "0" {
		t.Fatalf("tenant backlog %s", n)
	}
}

// Tiers are lanes served in priority order: an interactive request queued
// after batch ones is claimed first.
func TestLanePriority(t *testing.T) {
	ctx := context.Background()
	b := newBuiltin(t, BuiltinConfig{})
	for _, c := range []struct{ id, lane string }{{"b1", "batch"}, {"a1", "async"}, {"i1", "interactive"}} {
		j := job(c.id, `{}`)
		j.Lane = c.lane
		if _, err := b.Submit(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for i := 0; i < 3; i++ {
		ds, _, err := b.Claim(ctx, "c", 1, 0)
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim %d: %v %v", i, ds, err)
		}
		got = append(got, ds[0].ID)
	}
	if want := "i1 a1 b1"; strings.Join(got, " ") != want {
		t.Fatalf("claim order %v, want %s", got, want)
	}
}

// Redis killed (SIGKILL) and restarted with AOF: queued requests, the
// consumer group and stored results come back; the dispatcher goes on.
func TestRedisRestartWithAOF(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	b := NewBuiltin(rdb, BuiltinConfig{})
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"k1", "k2"} {
		if _, err := b.Submit(ctx, job(id, `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	ds, _, _ := b.Claim(ctx, "c", 1, 0)
	if len(ds) != 1 {
		t.Fatal("no claim")
	}
	if ok, _ := b.Finish(ctx, ds[0], Result{Status: 200, Body: []byte(`{"r":1}`)}); !ok {
		t.Fatal("finish")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Fetch(ctx, "t1", ds[0].ID); err != nil || r.Result.Status != 200 {
		t.Fatalf("stored result after the restart: %+v %v", r, err)
	}
	ds2, _, err := b.Claim(ctx, "c", 1, 0)
	if err != nil || len(ds2) != 1 || ds2[0].ID == ds[0].ID {
		t.Fatalf("the queued request after the restart: %v %v", ds2, err)
	}
}

// A Redis at its memory limit (noeviction) still serves stored results (a
// fetch is how memory comes back) and refuses a claim without a trace:
// the request is not marked running and no run is counted.
func TestRedisFullReadsAndClaims(t *testing.T) {
	ctx := context.Background()
	b := newBuiltin(t, BuiltinConfig{})
	for _, id := range []string{"done1", "q1"} {
		if _, err := b.Submit(ctx, job(id, `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	ds, _, err := b.Claim(ctx, "c", 1, 0)
	if err != nil || len(ds) != 1 || ds[0].ID != "done1" {
		t.Fatalf("claim: %v %v", ds, err)
	}
	if ok, err := b.Finish(ctx, ds[0], Result{Status: 200, Body: []byte(`{"r":1}`)}); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	// Full: maxmemory below what is in use, so every write that may grow
	// memory is refused.
	if err := b.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer b.rdb.ConfigSet(ctx, "maxmemory", "0")
	if err := b.rdb.Set(ctx, "probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Redis accepts writes while full: %v", err)
	}
	r, err := b.Fetch(ctx, "t1", "done1")
	if err != nil || r.Result.Status != 200 {
		t.Fatalf("fetch of a stored result while full: %+v %v", r, err)
	}
	if ttl := b.rdb.PTTL(ctx, b.jobKey("t1", "done1")).Val(); ttl > b.cfg.Grace {
		t.Fatalf("ttl after the first fetch %v, want ≤ grace", ttl)
	}
	if _, _, err := b.Claim(ctx, "c", 1, 0); err == nil {
		t.Fatal("a claim succeeded while Redis was full")
	}
	if n := b.Stashed("c"); n != 1 {
		t.Fatalf("stashed %d, want the refused entry", n)
	}
	if r, _ := b.Fetch(ctx, "t1", "q1"); r.State != StateQueued {
		t.Fatalf("refused claim left state %q", r.State)
	}
	if err := b.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	ds, _, err = b.Claim(ctx, "c", 1, 0)
	if err != nil || len(ds) != 1 || ds[0].ID != "q1" || ds[0].Deliveries != 1 {
		t.Fatalf("claim after the episode: %+v %v", ds, err)
	}
}
