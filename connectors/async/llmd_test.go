package async

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/connectors/async/redistest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func fixedLLMD(rdb redis.UniversalClient) *LLMD {
	return NewLLMD(rdb, LLMDConfig{Now: func() time.Time { return time.Unix(1764044000, 0) },
		Token: func() string { return "0123456789abcdef0123456789abcdef" }})
}

// Golden envelopes: exactly section 3's shape.
func TestLLMDEnvelopeGolden(t *testing.T) {
	l := fixedLLMD(nil)
	cases := []struct {
		name string
		job  Job
	}{
		{"chat", Job{Tenant: "team-a", ID: "req-1", Queue: "request-sortedset", Path: "/v1/chat/completions",
			Body:    []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`),
			Created: time.Unix(1764044000, 0), Deadline: time.Unix(1764047600, 0),
			Headers: map[string]string{"X-Llm-D-Slo-Ttft-Ms": "500", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}},
		{"completions-default-tenant", Job{Tenant: "default", ID: "c-2", Queue: "batch-q", Path: "/v1/completions",
			Body: []byte(`{"model":"m","prompt":"x"}`), Created: time.Unix(1764044000, 0), Deadline: time.Unix(1764044060, 0)}},
	}
	for _, c := range cases {
		got, err := l.BuildEnvelope(&c.job, "0123456789abcdef0123456789abcdef")
		if err != nil {
			t.Fatal(err)
		}
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, got, "", "  ")
		pretty.WriteByte('\n')
		path := filepath.Join("testdata", "llmd_envelope_"+c.name+".json")
		if *update {
			_ = os.WriteFile(path, pretty.Bytes(), 0o644)
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pretty.Bytes(), want) {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, pretty.Bytes(), want)
		}
	}
}

// Submit writes the keys of section 3 in one MULTI/EXEC; a processor that
// follows section 3 (ZPOPMIN, LPUSH the result, clear the marker if the
// token matches) makes the result visible to Fetch; cancel sets the cancel
// key to the marker's token.
func TestLLMDSubmitFetchCancel(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	l := NewLLMD(rdb, LLMDConfig{Grace: 200 * time.Millisecond})
	j := &Job{Tenant: "t", ID: "a1", Queue: "request-sortedset", Path: "/v1/chat/completions",
		Body: []byte(`{"model":"m"}`), Created: time.Now(), Deadline: time.Now().Add(time.Hour)}
	if s, err := l.Submit(ctx, j); err != nil || s.Outcome != Created {
		t.Fatalf("submit %+v %v", s, err)
	}
	if s, _ := l.Submit(ctx, j); s.Outcome != Reattached {
		t.Fatalf("resubmit %+v", s)
	}
	other := *j
	other.Body, other.BodyHash = []byte(`{"model":"x"}`), ""
	if s, _ := l.Submit(ctx, &other); s.Outcome != Conflict {
		t.Fatalf("other body %+v", s)
	}
	if r, _ := l.Fetch(ctx, "t", "a1"); r.State != StateQueued {
		t.Fatalf("fetch %+v", r)
	}
	// The processor.
	z, err := rdb.ZPopMin(ctx, "request-sortedset", 1).Result()
	if err != nil || len(z) != 1 {
		t.Fatalf("zpopmin %v %v", z, err)
	}
	if z[0].Score != float64(j.Deadline.Unix()) {
		t.Errorf("score %v, want the deadline", z[0].Score)
	}
	var env Envelope
	if err := json.Unmarshal([]byte(z[0].Member.(string)), &env); err != nil {
		t.Fatal(err)
	}
	tok := rdb.Get(ctx, "request-active:t:a1").Val()
	if env.Internal.RequestToken != tok || len(tok) != 32 || env.Data.ID != "t:a1" || env.Data.Metadata["userid"] != "t" {
		t.Fatalf("envelope %+v token %q", env, tok)
	}
	rec, _ := json.Marshal(ResultRecord{ID: env.Data.ID, StatusCode: 200, Payload: `{"ok":true}`, RequestToken: tok})
	rdb.LPush(ctx, env.Internal.ResultQueueName, rec)
	rdb.Expire(ctx, env.Internal.ResultQueueName, time.Hour)
	if rdb.Get(ctx, "request-active:t:a1").Val() == env.Internal.RequestToken {
		rdb.Del(ctx, "request-active:t:a1")
	}
	r, _ := l.Fetch(ctx, "t", "a1")
	if r.State != StateDone || r.Result.Status != 200 || string(r.Result.Body) != `{"ok":true}` {
		t.Fatalf("result %+v", r)
	}
	if ttl := rdb.PTTL(ctx, env.Internal.ResultQueueName).Val(); ttl > 200*time.Millisecond {
		t.Fatalf("ttl %v after the first fetch", ttl)
	}
	// Cancel of a live one: the cancel key carries the marker's token.
	j2 := *j
	j2.ID, j2.BodyHash = "a2", ""
	if _, err := l.Submit(ctx, &j2); err != nil {
		t.Fatal(err)
	}
	if err := l.Cancel(ctx, "t", "a2", false); err != nil {
		t.Fatal(err)
	}
	if c, a := rdb.Get(ctx, "request-cancel:t:a2").Val(), rdb.Get(ctx, "request-active:t:a2").Val(); c == "" || c != a {
		t.Fatalf("cancel key %q, active %q", c, a)
	}
	if ttl := rdb.TTL(ctx, "request-cancel:t:a2").Val(); ttl < 604000*time.Second {
		t.Fatalf("cancel ttl %v", ttl)
	}
	// DELETE is final: a record the AP pushes afterwards is not read.
	rec, _ = json.Marshal(ResultRecord{ID: "t:a2", StatusCode: 200, Payload: `{}`})
	rdb.LPush(ctx, "results:req:t:a2:"+rdb.Get(ctx, "request-active:t:a2").Val(), rec)
	if r, _ := l.Fetch(ctx, "t", "a2"); r.State != StateUnknown {
		t.Fatalf("deleted a2 %+v", r)
	}
	// A deadline result record (status 0), in a3's generation's mailbox.
	j3 := *j
	j3.ID, j3.BodyHash = "a3", ""
	if _, err := l.Submit(ctx, &j3); err != nil {
		t.Fatal(err)
	}
	rec, _ = json.Marshal(ResultRecord{ID: "t:a3", StatusCode: 0, ErrorCode: CodeDeadline, ErrorMessage: "deadline exceeded"})
	rdb.LPush(ctx, "results:req:t:a3:"+rdb.Get(ctx, "request-active:t:a3").Val(), rec)
	rdb.Del(ctx, "request-active:t:a3")
	if r, _ := l.Fetch(ctx, "t", "a3"); r.Result.Code != CodeDeadline || r.Result.Status != 0 {
		t.Fatalf("deadline record %+v", r)
	}
	if r, _ := l.Fetch(ctx, "t", "never"+strconv.Itoa(1)); r.State != StateUnknown {
		t.Fatalf("unknown %+v", r)
	}
}
