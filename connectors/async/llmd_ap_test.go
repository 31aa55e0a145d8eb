package async

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/connectors/async/redistest"
)

// apProc plays an llm-d-async processor's part on one sorted-set queue, step
// by step, as its redis-sortedset flow does at llm-d-async commit
// 5de949bfcc4b81f75845d7516b605dea889a84f1 (pkg/redis/sortedset_impl.go,
// pkg/asyncworker/worker.go): pop the earliest deadline; a deadline already
// passed drops the request with no result record (only the active marker
// and cancel key, if they still hold its token, are deleted); a cancel key
// holding its token yields a CANCELLED record; else the request runs. The
// record is LPUSHed to the envelope's result_queue_name (JSON of its
// ResultMessage: the token is not in it), then the marker and cancel key
// are deleted if they still hold the token.
type apProc struct {
	t     *testing.T
	rdb   *redis.Client
	queue string
	now   func() time.Time
}

var apCleanup = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then redis.call("DEL", KEYS[1]) end
if redis.call("GET", KEYS[2]) == ARGV[1] then redis.call("DEL", KEYS[2]) end
return 1
`)

// pop takes the next envelope (nil when the queue is empty) and reports
// whether it may run (false: dropped for its deadline, or cancelled, and
// already answered).
func (p *apProc) pop(ctx context.Context) (*Envelope, bool) {
	p.t.Helper()
	z, err := p.rdb.ZPopMin(ctx, p.queue, 1).Result()
	if err != nil || len(z) == 0 {
		return nil, false
	}
	var env Envelope
	if err := json.Unmarshal([]byte(z[0].Member.(string)), &env); err != nil {
		p.t.Fatal(err)
	}
	id, tok := env.Data.ID, env.Internal.RequestToken
	if z[0].Score < float64(p.now().Unix()) {
		apCleanup.Run(ctx, p.rdb, []string{"request-active:" + id, "request-cancel:" + id}, tok)
		return &env, false
	}
	if p.rdb.Get(ctx, "request-cancel:"+id).Val() == tok {
		p.finish(ctx, &env, ResultRecord{ID: id, Payload: `{"error":"cancelled"}`, ErrorCode: CodeCancelled, ErrorMessage: "cancelled"})
		return &env, false
	}
	return &env, true
}

func (p *apProc) finish(ctx context.Context, env *Envelope, r ResultRecord) {
	r.ID = env.Data.ID
	b, _ := json.Marshal(r)
	p.rdb.LPush(ctx, env.Internal.ResultQueueName, b)
	p.rdb.Expire(ctx, env.Internal.ResultQueueName, time.Hour)
	apCleanup.Run(ctx, p.rdb, []string{"request-active:" + env.Data.ID, "request-cancel:" + env.Data.ID}, env.Internal.RequestToken)
}

// run pops and answers every queued request with its own body.
func (p *apProc) run(ctx context.Context) {
	for {
		env, ok := p.pop(ctx)
		if env == nil {
			return
		}
		if ok {
			p.finish(ctx, env, ResultRecord{StatusCode: 200, Payload: string(env.Data.Payload)})
		}
	}
}

func newLLMD(t *testing.T, cfg LLMDConfig) (*LLMD, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	return NewLLMD(rdb, cfg), rdb
}

// backendUnderTest drives one back end and a processor for it: the
// builtin's own claim/finish, or an llm-d-async processor (apProc).
type backendUnderTest struct {
	be Backend
	// take claims the next queued request (the running one); done answers
	// it with its own body; drain runs whatever is queued to completion.
	take  func() any
	done  func(any)
	drain func()
}

func backendsUnderTest(t *testing.T) map[string]func(t *testing.T) backendUnderTest {
	ctx := context.Background()
	return map[string]func(t *testing.T) backendUnderTest{
		"builtin": func(t *testing.T) backendUnderTest {
			b := newBuiltin(t, BuiltinConfig{})
			take := func() any {
				ds, _, err := b.Claim(ctx, "c", 1, 0)
				if err != nil || len(ds) != 1 {
					t.Fatalf("claim %v %v", ds, err)
				}
				return ds[0]
			}
			done := func(h any) {
				d := h.(*Delivery)
				_, _ = b.Finish(ctx, d, Result{Status: 200, Body: d.Body})
			}
			drain := func() {
				for {
					ds, _, _ := b.Claim(ctx, "c", 1, 0)
					if len(ds) == 0 {
						return
					}
					done(ds[0])
				}
			}
			return backendUnderTest{be: b, take: take, done: done, drain: drain}
		},
		"llm-d-async": func(t *testing.T) backendUnderTest {
			l, rdb := newLLMD(t, LLMDConfig{})
			p := &apProc{t: t, rdb: rdb, queue: "default", now: time.Now}
			take := func() any {
				env, ok := p.pop(ctx)
				if !ok {
					t.Fatalf("pop %+v", env)
				}
				return env
			}
			done := func(h any) {
				env := h.(*Envelope)
				p.finish(ctx, env, ResultRecord{StatusCode: 200, Payload: string(env.Data.Payload)})
			}
			return backendUnderTest{be: l, take: take, done: done, drain: func() { p.run(ctx) }}
		},
	}
}

// DELETE is final on both back ends: from the DELETE on, GET reads 410
// (unknown) whatever the processor still does with the deleted request
// (answer it cancelled, finish a run it had started); a re-POST of the id
// with another body that is accepted is a new request whose result is its
// own, never the deleted one's. (Before generations, the llm-d back end
// served the old body's result to the re-POST, and GET went 202, 499, 200.)
func TestDeleteFinal(t *testing.T) {
	ctx := context.Background()
	for name, mk := range backendsUnderTest(t) {
		t.Run(name, func(t *testing.T) {
			u := mk(t)
			be := u.be
			gone := func(step string) {
				t.Helper()
				if r, err := be.Fetch(ctx, "t1", "x"); err != nil || r.State != StateUnknown {
					t.Fatalf("%s: GET reads %+v %v, want unknown (410)", step, r, err)
				}
			}
			own := func(step, body string) {
				t.Helper()
				r, err := be.Fetch(ctx, "t1", "x")
				if err != nil || r.State != StateDone || r.Result.Status != 200 || string(r.Result.Body) != body {
					t.Fatalf("%s: %+v %v, want 200 %s", step, r, err, body)
				}
			}
			// Queued, deleted, re-posted with another body.
			if s, err := be.Submit(ctx, job("x", `{"n":1}`)); err != nil || s.Outcome != Created {
				t.Fatalf("submit %+v %v", s, err)
			}
			if err := be.Cancel(ctx, "t1", "x", false); err != nil {
				t.Fatal(err)
			}
			gone("after DELETE")
			u.drain()
			gone("after the processor saw the deleted request")
			if s, _ := be.Submit(ctx, job("x", `{"n":2}`)); s.Outcome != Created {
				t.Fatalf("re-POST after DELETE: %+v", s)
			}
			u.drain()
			own("re-POST", `{"n":2}`)

			// Running, deleted; the run finishes afterwards.
			_ = be.Cancel(ctx, "t1", "x", false)
			if s, _ := be.Submit(ctx, job("x", `{"n":3}`)); s.Outcome != Created {
				t.Fatalf("submit 3: %+v", s)
			}
			h := u.take()
			if err := be.Cancel(ctx, "t1", "x", false); err != nil {
				t.Fatal(err)
			}
			gone("DELETE while running")
			if s, _ := be.Submit(ctx, job("x", `{"n":4}`)); s.Outcome == Created {
				// llm-d-async frees the id at once (a new generation).
				u.done(h) // the deleted run finishes: its result is not the new request's
				if r, _ := be.Fetch(ctx, "t1", "x"); r.State == StateDone {
					t.Fatalf("the re-POST reads the deleted run's outcome %+v", r)
				}
				u.drain()
				own("re-POST while the deleted one ran", `{"n":4}`)
				return
			} else if s.Outcome != Conflict {
				t.Fatalf("re-POST while the deleted one runs: %+v", s)
			}
			// The builtin refuses the id while the deleted request runs
			// (409) and frees it when the run ends.
			u.done(h)
			gone("the deleted run finished")
			if s, _ := be.Submit(ctx, job("x", `{"n":4}`)); s.Outcome != Created {
				t.Fatalf("re-POST after the deleted run ended: %+v", s)
			}
			u.drain()
			own("re-POST after the deleted run", `{"n":4}`)
		})
	}
}

// A deadline that passes while the request is queued reads as 504's
// DEADLINE_EXCEEDED, not 410: the processor drops such a request without a
// record, and the active marker expires at the deadline. Within a short
// slack past the deadline it is still pending (the worker's own
// DEADLINE_EXCEEDED record may be on its way).
func TestLLMDDeadlineWhileQueued(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	l, rdb := newLLMD(t, LLMDConfig{Now: func() time.Time { return now }})
	p := &apProc{t: t, rdb: rdb, queue: "default", now: func() time.Time { return now }}
	j := job("late", `{}`)
	j.Deadline = now.Add(30 * time.Second)
	if _, err := l.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	now = j.Deadline.Add(time.Second) // the AP comes to it after the deadline
	if env, ok := p.pop(ctx); env == nil || ok {
		t.Fatalf("the processor ran a request past its deadline")
	}
	if n := rdb.Exists(ctx, "request-active:t1:late").Val(); n != 0 {
		t.Fatal("the processor left the marker")
	}
	if r, _ := l.Fetch(ctx, "t1", "late"); r.State != StateQueued {
		t.Fatalf("within the slack: %+v, want pending", r)
	}
	now = j.Deadline.Add(deadlineSlack + time.Millisecond)
	for i := 0; i < 2; i++ { // and it stays so
		if r, _ := l.Fetch(ctx, "t1", "late"); r.State != StateDone || r.Result.Code != CodeDeadline {
			t.Fatalf("past the deadline: %+v, want DEADLINE_EXCEEDED", r)
		}
	}
	// Its life is the grace from the first fetch on, as a result's.
	if ttl := rdb.PTTL(ctx, "celflow:llmd:hash:t1:late").Val(); ttl > 60*time.Second {
		t.Fatalf("ttl %v after the first fetch", ttl)
	}
}

// A wait-mode client that leaves stores CANCELLED at once, and it stays the
// outcome when the processor answers the request afterwards.
func TestLLMDCancelKeepIsFinal(t *testing.T) {
	ctx := context.Background()
	l, rdb := newLLMD(t, LLMDConfig{})
	p := &apProc{t: t, rdb: rdb, queue: "default", now: time.Now}
	if _, err := l.Submit(ctx, job("w", `{}`)); err != nil {
		t.Fatal(err)
	}
	env, ok := p.pop(ctx) // running
	if !ok {
		t.Fatal("pop")
	}
	if err := l.Cancel(ctx, "t1", "w", true); err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"after the cancel", "after the processor's late answer"} {
		if r, _ := l.Fetch(ctx, "t1", "w"); r.Result.Code != CodeCancelled {
			t.Fatalf("%s: %+v", step, r)
		}
		p.finish(ctx, env, ResultRecord{StatusCode: 200, Payload: `{}`})
	}
}

// The client's request id is in the envelope's headers (the AP sends them
// with the request), whatever the forwarded headers held.
func TestLLMDEnvelopeCarriesRequestID(t *testing.T) {
	l, rdb := newLLMD(t, LLMDConfig{})
	j := job("rid-7", `{}`)
	j.Headers["X-Request-Id"] = "spoofed"
	if _, err := l.Submit(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	p := &apProc{t: t, rdb: rdb, queue: "default", now: time.Now}
	env, _ := p.pop(context.Background())
	if env == nil || env.Data.Headers["x-request-id"] != "rid-7" || len(env.Data.Headers) != 1 {
		t.Fatalf("headers %v", env.Data.Headers)
	}
}

// The processor's error text is relayed without the worker network's
// URLs and addresses; the original goes to the Scrubbed hook once.
func TestLLMDErrorMessageScrubbed(t *testing.T) {
	ctx := context.Background()
	var logged []string
	l, rdb := newLLMD(t, LLMDConfig{Scrubbed: func(member, orig string) { logged = append(logged, member+" "+orig) }})
	p := &apProc{t: t, rdb: rdb, queue: "default", now: time.Now}
	if _, err := l.Submit(ctx, job("e", `{}`)); err != nil {
		t.Fatal(err)
	}
	env, _ := p.pop(ctx)
	orig := `Post "http://vllm-decode.llm.svc.cluster.local:8000/v1/chat/completions": dial tcp 10.12.3.4:8000: connect: connection refused`
	p.finish(ctx, env, ResultRecord{ErrorCode: CodeInference, ErrorMessage: orig})
	for i := 0; i < 2; i++ {
		r, _ := l.Fetch(ctx, "t1", "e")
		if r.Result.Code != CodeInference {
			t.Fatalf("%+v", r)
		}
		for _, leak := range []string{"http", "vllm-decode", "10.12", "8000", "/v1/chat"} {
			if strings.Contains(r.Result.Message, leak) {
				t.Fatalf("relayed %q contains %q", r.Result.Message, leak)
			}
		}
		if !strings.Contains(r.Result.Message, "connection refused") {
			t.Fatalf("relayed %q lost the reason", r.Result.Message)
		}
	}
	if len(logged) != 1 || logged[0] != "t1:e "+orig {
		t.Fatalf("logged %q", logged)
	}
}

func TestScrubMessage(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"deadline exceeded", "deadline exceeded"},
		{"cancelled", "cancelled"},
		{`Post "https://10.0.0.7:8443/v1/completions?x=1": EOF`, `Post "<redacted>": EOF`},
		{"dial tcp 192.168.1.20:8000: i/o timeout", "dial tcp <redacted>: i/o timeout"},
		{"dial tcp [fd00::1]:8000: refused", "dial tcp <redacted>: refused"},
		{"no route to fe80::1%eth0", "no route to <redacted>"},
		{"2001:db8:0:0:0:0:2:1 unreachable", "<redacted> unreachable"},
		{"prefill-0.prefill:8200 reset the stream", "<redacted> reset the stream"},
		{"connect to localhost:9000 failed", "connect to <redacted> failed"},
		{"retried at 12:30:45, gave up", "retried at 12:30:45, gave up"},
		{"redis://:secret@redis.internal:6379/0 down", "<redacted> down"},
	} {
		if got := ScrubMessage(c.in); got != c.want {
			t.Errorf("ScrubMessage(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
