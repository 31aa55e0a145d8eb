package prefill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/decode"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
	"github.com/celflow/celflow/nodes/prefill"
)

func node(t *testing.T, build func(*engine.BuildContext, json.RawMessage) (engine.Node, error), c *upstream.Client, params string) engine.Node {
	t.Helper()
	n, err := build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: c}}, json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var (
	reHost = regexp.MustCompile(`"bootstrap_host":"([^"]*)"`)
	rePort = regexp.MustCompile(`"bootstrap_port":(\d+)`)
	reRoom = regexp.MustCompile(`"bootstrap_room":(\d+)`)
)

func field(re *regexp.Regexp, body []byte) string {
	if m := re.FindSubmatch(body); m != nil {
		return string(m[1])
	}
	return ""
}

// ACCEPTANCE 170: sequential shape through a gateway.
func TestSGLangSequentialGateway(t *testing.T) {
	t.Setenv("SGLANG_BOOTSTRAP_PORT", "")
	for _, tc := range []struct {
		name, reply, host, port string
		fail                    bool
	}{
		{name: "host and port in kv params", reply: `{"kv_transfer_params":{"bootstrap_host":"10.1.0.7","bootstrap_port":9100}}`, host: "10.1.0.7", port: "9100"},
		{name: "top-level host, own port", reply: `{"bootstrap_host":"10.1.0.8"}`, host: "10.1.0.8", port: "8998"},
		{name: "no host", reply: `{"id":"x"}`, fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := legtest.NewWorker(t, legtest.JSON(200, tc.reply))
			c := legtest.Gateway(t, w.URL)
			p := node(t, prefill.Build, c, `{"kv_connector":"kv-sglang"}`)
			d := node(t, decode.Build, c, `{"kv_connector":"kv-sglang"}`)
			run, _ := legtest.Run(t, engine.RouteChat, `{"messages":[]}`, nil)
			res := p.Run(run.Ctx, legtest.Exec(run, "prefill"))
			pb := w.Calls()[0].Body
			if field(reHost, pb) != "" || field(rePort, pb) != "8998" || field(reRoom, pb) == "" {
				t.Fatalf("prefill body %s", pb)
			}
			if tc.fail {
				if e := engine.AsError(res.Err); e == nil || e.Code() != "upstream_protocol_error" {
					t.Fatalf("got %v", res.Err)
				}
				return
			}
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if r := d.Run(run.Ctx, legtest.Exec(run, "decode")); r.Err != nil {
				t.Fatal(r.Err)
			}
			db := w.Calls()[1].Body
			if field(reHost, db) != tc.host || field(rePort, db) != tc.port || field(reRoom, db) != field(reRoom, pb) {
				t.Fatalf("decode body %s (prefill %s)", db, pb)
			}
		})
	}
}

// concurrentSetup: direct pools, a prefill worker with bootstrap port 9100.
func concurrentSetup(t *testing.T, pre, dec func(http.ResponseWriter, *http.Request, legtest.Call)) (engine.Node, engine.Node, *legtest.Worker, *legtest.Worker) {
	t.Setenv("SGLANG_BOOTSTRAP_PORT", "")
	pw, dw := legtest.NewWorker(t, pre), legtest.NewWorker(t, dec)
	c := legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RolePrefill: {{URL: pw.URL, BootstrapPort: 9100}},
		upstream.RoleDecode:  {{URL: dw.URL}},
	}})
	p := node(t, prefill.Build, c, `{"kv_connector":"kv-sglang","shape":"concurrent"}`)
	d := node(t, decode.Build, c, `{"kv_connector":"kv-sglang"}`)
	return p, d, pw, dw
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal(what)
	}
}

// ACCEPTANCE 168, 169, 171: decode is sent without waiting for prefill and
// streams to the client; both legs share host, port and room; prefill goes on
// after decode ended.
func TestSGLangConcurrent(t *testing.T) {
	decodeSeen, prefillDone := make(chan struct{}), make(chan struct{})
	prefillCancelled := false
	p, d, pw, dw := concurrentSetup(t,
		func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
			defer close(prefillDone)
			select { // an SGLang prefill waits for decode to join the room
			case <-decodeSeen:
			case <-r.Context().Done():
				prefillCancelled = true
				return
			}
			_, _ = w.Write([]byte(`{"id":"p"}`))
		},
		func(w http.ResponseWriter, _ *http.Request, _ legtest.Call) {
			close(decodeSeen)
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("data: [DONE]\n\n"))
		})
	run, rec := legtest.Run(t, engine.RouteChat, `{"messages":[],"stream":true}`, nil)
	pres := make(chan engine.Result, 1)
	go func() { pres <- p.Run(run.Ctx, legtest.Exec(run, "prefill")) }()
	dres := d.Run(run.Ctx, legtest.Exec(run, "decode"))
	if dres.Err != nil || !dres.Responded || rec.Body.String() != "data: [DONE]\n\n" {
		t.Fatalf("decode %+v %q", dres, rec.Body)
	}
	wait(t, prefillDone, "prefill never finished")
	if r := <-pres; r.Err != nil || prefillCancelled {
		t.Fatalf("prefill %+v cancelled=%v", r, prefillCancelled)
	}
	pb, db := pw.Calls()[0].Body, dw.Calls()[0].Body
	for _, re := range []*regexp.Regexp{reHost, rePort, reRoom} {
		if field(re, pb) == "" || field(re, pb) != field(re, db) {
			t.Fatalf("legs disagree on %v: %s vs %s", re, pb, db)
		}
	}
	if field(reHost, pb) != "127.0.0.1" || field(rePort, pb) != "9100" {
		t.Fatalf("host/port from the picked worker: %s", pb)
	}
	if handoff.KV.Value(run).PrefillRan {
		t.Fatal("the concurrent shape provides nothing")
	}
}

// A prefill failure before decode's reply started cancels decode, and the
// client gets prefill's error.
func TestSGLangConcurrentPrefillFails(t *testing.T) {
	decodeCancelled := make(chan struct{})
	decodeArrived := make(chan struct{})
	p, d, _, _ := concurrentSetup(t,
		func(w http.ResponseWriter, _ *http.Request, _ legtest.Call) {
			<-decodeArrived
			w.WriteHeader(500)
		},
		func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
			close(decodeArrived)
			select {
			case <-r.Context().Done():
				close(decodeCancelled)
			case <-time.After(5 * time.Second):
			}
		})
	run, rec := legtest.Run(t, engine.RouteChat, `{"messages":[]}`, nil)
	dres := make(chan engine.Result, 1)
	go func() { dres <- d.Run(run.Ctx, legtest.Exec(run, "decode")) }()
	pr := p.Run(run.Ctx, legtest.Exec(run, "prefill"))
	if e := engine.AsError(pr.Err); e == nil || e.Code() != "bad_gateway" {
		t.Fatalf("prefill %+v", pr)
	}
	wait(t, decodeCancelled, "decode not cancelled")
	r := <-dres
	e := engine.AsError(r.Err)
	if e == nil || e.Node != "prefill" || e.Code() != "bad_gateway" || r.Responded || rec.Body.Len() != 0 {
		t.Fatalf("decode %+v (%v)", r, e)
	}
}

// ACCEPTANCE 171: a client disconnect cancels both legs.
func TestSGLangConcurrentClientGone(t *testing.T) {
	var arrived = make(chan struct{}, 2)
	var cancelled = make(chan struct{}, 2)
	hold := func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(5 * time.Second):
		}
	}
	p, d, _, _ := concurrentSetup(t, hold, hold)
	ctx, cancel := context.WithCancel(context.Background())
	run, _ := legtest.RunCtx(ctx, engine.RouteChat, `{"messages":[]}`, nil)
	res := make(chan engine.Result, 2)
	go func() { res <- p.Run(ctx, legtest.Exec(run, "prefill")) }()
	go func() { res <- d.Run(ctx, legtest.Exec(run, "decode")) }()
	for range 2 {
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("legs not sent")
		}
	}
	cancel()
	for range 2 {
		select {
		case <-cancelled:
		case <-time.After(time.Second):
			t.Fatal("leg not cancelled within 1s")
		}
		if e := engine.AsError((<-res).Err); e == nil || e.Kind != engine.KindCancelled {
			t.Fatalf("got %v", e)
		}
	}
}

// ACCEPTANCE 168: many requests: rooms are integers in range, shared, distinct.
func TestSGLangRooms(t *testing.T) {
	p, d, pw, dw := concurrentSetup(t, nil, nil)
	rooms := map[string]bool{}
	const n = 1000 // the item says 1,000 requests
	for i := 0; i < n; i++ {
		run, _ := legtest.Run(t, engine.RouteCompletions, `{"prompt":"x"}`, nil)
		done := make(chan engine.Result, 1)
		go func() { done <- p.Run(run.Ctx, legtest.Exec(run, "prefill")) }()
		if r := d.Run(run.Ctx, legtest.Exec(run, "decode")); r.Err != nil {
			t.Fatal(r.Err)
		}
		if r := <-done; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	pc, dc := pw.Calls(), dw.Calls()
	byRoom := map[string]int{}
	for i := range pc {
		room := field(reRoom, pc[i].Body)
		if len(room) == 0 || len(room) > 19 || (len(room) == 19 && room > "9223372036854775807") {
			t.Fatalf("room %q out of range", room)
		}
		rooms[room] = true
		byRoom[room]++
		if json.Valid(pc[i].Body) == false {
			t.Fatal("invalid body")
		}
	}
	for i := range dc {
		byRoom[field(reRoom, dc[i].Body)]++
	}
	for _, c := range append(pc, dc...) {
		if bytes.Contains(c.Body, []byte("kv_transfer_params")) {
			t.Fatalf("kv-sglang leg carries kv_transfer_params: %s", c.Body)
		}
	}
	if len(rooms) != n {
		t.Fatalf("%d distinct rooms of %d", len(rooms), n)
	}
	for room, c := range byRoom {
		if c != 2 {
			t.Fatalf("room %s on %d legs", room, c)
		}
	}
}
