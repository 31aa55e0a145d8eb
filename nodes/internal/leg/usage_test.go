package leg

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

// chunked yields b in reads of at most n bytes, as a relayed body arrives.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

func (c *chunked) Close() error { return nil }

// The tap finds the worker's cached_tokens at the end of a JSON body and
// in the final chunk of a stream, whatever the chunk boundaries (a name or
// number cut between reads included), passes every byte through
// unchanged, and reports only at the end of the body.
func TestUsageTapFinds(t *testing.T) {
	stream := "data: {\"request_id\":\"r\",\"choices\":[{\"index\":0,\"token_ids\":[5]}],\"usage\":null}\n\n" +
		"data: {\"request_id\":\"r\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":4,\"total_tokens\":104,\"prompt_tokens_details\":{\"cached_tokens\":96}}}\n\n" +
		"data: [DONE]\n\n"
	body := `{"id":"cmpl-1","choices":[{"text":"the \"cached_tokens\": 7 in a completion"}],` +
		`"usage":{"prompt_tokens":40,"prompt_tokens_details": {"cached_tokens" : 32}},"kv_transfer_params":null}`
	for _, tc := range []struct {
		name, in string
		want     int
		found    bool
	}{
		{"stream", stream, 96, true},
		{"json, the last one wins", body, 32, true},
		{"no usage", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", 0, false},
		{"details null", `{"usage":{"prompt_tokens":3,"prompt_tokens_details":null}}`, 0, false},
	} {
		for _, n := range []int{1, 2, 3, 7, 16, 63, 64, 65, 4096} {
			u := &usageTap{rc: &chunked{b: []byte(tc.in), n: n}}
			var out bytes.Buffer
			buf := make([]byte, 4096)
			for {
				k, err := u.Read(buf)
				out.Write(buf[:k])
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if out.String() != tc.in {
				t.Fatalf("%s/%d: body changed", tc.name, n)
			}
			if u.found != tc.found || u.cached != tc.want || !u.done {
				t.Errorf("%s, reads of %d: found %v cached %d done %v; want %v %d", tc.name, n, u.found, u.cached, u.done, tc.found, tc.want)
			}
		}
	}
}

func TestMemberInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{`:5}`, 5, true},
		{" : \n 1234,", 1234, true},
		{`:12`, 0, false}, // may go on in the next chunk
		{`:-1}`, 0, false},
		{`:null}`, 0, false},
		{`,"x":1`, 0, false},
		{`:`, 0, false},
	} {
		v, ok := memberInt([]byte(tc.in))
		if v != tc.want || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.in, v, ok, tc.want, tc.ok)
		}
	}
}

// tapUsage leaves a body alone when no prediction was noted for the node,
// and a compressed one always.
func TestTapUsageOnlyPredicted(t *testing.T) {
	run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
	x := legtest.Exec(run, "decode")
	resp := &http.Response{Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}"))}
	orig := resp.Body
	tapUsage(x, resp)
	if resp.Body != orig {
		t.Error("a body was tapped without a predicted target")
	}
}

// Through a real leg: a cache-aware direct client picks by the run's
// tokens, the leg's span attributes carry the score and its terms, the
// relayed reply is the worker's byte for byte, and the worker's
// cached_tokens reaches the pool's truth counters.
func TestRelayFeedsTruth(t *testing.T) {
	const stream = "data: {\"choices\":[{\"index\":0,\"token_ids\":[1]}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\ndata: [DONE]\n\n"
	w := legtest.NewWorker(t, func(rw http.ResponseWriter, _ *http.Request, _ legtest.Call) {
		rw.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(rw, stream)
	})
	c := legtest.Direct(t, upstream.Config{Picker: "cache-aware", Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: w.URL}}}})
	ids := make([]int64, 40)
	for i := range ids {
		ids[i] = int64(i)
	}
	for turn := range 2 {
		run, rec := legtest.Run(t, engine.RouteGenerate, `{}`, nil)
		run.State.Tokens = engine.Tokens{Known: true, IDs: ids}
		x := legtest.Exec(run, "decode")
		var res engine.Result
		resp, tg, e := Call{Role: upstream.RoleDecode, Path: "/inference/v1/generate", Body: jsonb.Raw([]byte(`{}`))}.Send(context.Background(), x, c, &res)
		if e != nil {
			t.Fatal(e)
		}
		c.RecordPrefix(tg, ids)
		if _, ok := res.Attrs["celflow.route.score"]; !ok || res.Attrs["celflow.route.source"] != "index" {
			t.Fatalf("turn %d: attrs %v, want the route's score and source", turn, res.Attrs)
		}
		if want := 2 * turn; res.Attrs["celflow.route.cached_blocks"] != want {
			t.Errorf("turn %d: cached_blocks %v, want %d", turn, res.Attrs["celflow.route.cached_blocks"], want)
		}
		if r := Relay(x, resp, 0, 0); r.Err != nil {
			t.Fatal(r.Err)
		}
		if rec.Body.String() != stream {
			t.Fatalf("relayed %q", rec.Body.String())
		}
	}
	st := c.RouteStats()
	// Turn 0 predicted nothing and the worker said 32 (fn); turn 1
	// predicted 32 (2 blocks, the last token never counts) and got 32 (tp).
	if len(st) != 1 || st[0].FN != 1 || st[0].TP != 1 || st[0].PredictedTokens != 32 || st[0].ReportedTokens != 64 || st[0].CorrectTokens != 32 {
		t.Fatalf("route stats %+v", st)
	}
}

// BenchmarkUsageTap: reading a 400-event stream (about 64 KiB) in the
// relay's 32 KiB reads, plain and through the tap.
func BenchmarkUsageTap(b *testing.B) {
	var sb strings.Builder
	for i := range 400 {
		fmt.Fprintf(&sb, "data: {\"request_id\":\"r\",\"choices\":[{\"index\":0,\"token_ids\":[%d]}],\"usage\":null}\n\n", i)
	}
	sb.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"prompt_tokens_details\":{\"cached_tokens\":96}}}\n\ndata: [DONE]\n\n")
	body := []byte(sb.String())
	buf := make([]byte, 32<<10)
	for _, tapped := range []bool{false, true} {
		b.Run(fmt.Sprintf("tapped=%v", tapped), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for range b.N {
				var r io.Reader = &chunked{b: body, n: 1500} // a TCP segment's worth per read
				if tapped {
					r = &usageTap{rc: &chunked{b: body, n: 1500}, t: &upstream.Target{}}
				}
				for {
					if _, err := r.Read(buf); err == io.EOF {
						break
					}
				}
			}
		})
	}
}

// Through a real leg: while worker A streams a reply to the client, a
// cold prompt goes to idle worker B (the relay counts in A's load though
// its leg left in-flight at the headers); once the stream ended, A counts
// nothing.
func TestRelayLoadsEndpoint(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	stream := func(rw http.ResponseWriter, _ *http.Request, _ legtest.Call) {
		rw.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(rw, "data: {\"choices\":[]}\n\n")
		rw.(http.Flusher).Flush()
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		fmt.Fprint(rw, "data: {\"choices\":[],\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n")
	}
	a, b := legtest.NewWorker(t, stream), legtest.NewWorker(t, stream)
	c := legtest.Direct(t, upstream.Config{Picker: "cache-aware", Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: a.URL}, {URL: b.URL}}}})
	send := func(seed int64) (*upstream.Target, *engine.Exec, *http.Response) {
		t.Helper()
		run, _ := legtest.Run(t, engine.RouteGenerate, `{}`, nil)
		run.State.Tokens = engine.Tokens{Known: true, IDs: []int64{seed, seed + 1, seed + 2}}
		x := legtest.Exec(run, "decode")
		var res engine.Result
		resp, tg, e := Call{Role: upstream.RoleDecode, Path: "/inference/v1/generate", Body: jsonb.Raw([]byte(`{}`))}.Send(context.Background(), x, c, &res)
		if e != nil {
			t.Fatal(e)
		}
		return tg, x, resp
	}
	t1, x1, resp1 := send(100)
	done := make(chan engine.Result)
	go func() { done <- Relay(x1, resp1, 0, 0) }()
	<-started
	for i := range 3 {
		t2, x2, resp2 := send(int64(200 + 10*i))
		if t2.Base == t1.Base {
			t.Fatalf("a cold prompt went to %s, which is streaming a reply, not to the idle worker", t2.Base)
		}
		resp2.Body.Close()
		_ = x2
	}
	close(release)
	if r := <-done; r.Err != nil {
		t.Fatal(r.Err)
	}
	// A's relay ended: the next cold prompts spread over both again.
	seen := map[string]bool{}
	for i := range 4 {
		tg, _, resp := send(int64(300 + 10*i))
		seen[tg.Base] = true
		resp.Body.Close()
	}
	if len(seen) != 2 {
		t.Errorf("after the stream ended, cold prompts went to %v: want both workers", seen)
	}
}
