package async

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/connectors/async/redistest"
)

// apRateLimit is llm-d-async's redis-quota gate in its default mode
// (rate-limit), as pkg/redis/quota_gate.go acquireRateLimit reads at
// github.com/llm-d/llm-d-async commit 5de949bfcc4b81f75845d7516b605dea889a84f1
// (2026-08-07): one EVAL on the key <prefix><attribute>:<value> with now in
// Unix nanoseconds, min = now - window, ttl = 2 * whole seconds of the
// window (3600 when 0); reserved (1) or overflow (0). The module proxy
// does not serve that module, so the gate cannot be built in a test; this
// is its Redis command sequence, and the golden states below are what it
// leaves behind.
var apRateLimit = redis.NewScript(`
		redis.call("ZREMRANGEBYSCORE", KEYS[1], 0, ARGV[1])
		local count = redis.call("ZCARD", KEYS[1])
		if count >= tonumber(ARGV[2]) then
			return 0
		end
		redis.call("ZADD", KEYS[1], ARGV[3], ARGV[3])
		redis.call("EXPIRE", KEYS[1], ARGV[4])
		return 1
`)

func apAcquire(ctx context.Context, rdb redis.UniversalClient, key string, limit int, window time.Duration, now time.Time) (bool, error) {
	ttl := int(window.Seconds()) * 2
	if ttl <= 0 {
		ttl = 3600
	}
	ns := now.UnixNano()
	res, err := apRateLimit.Run(ctx, rdb, []string{key}, ns-window.Nanoseconds(), limit, ns, ttl).Int64()
	return res == 1, err
}

// The quota key celflow writes is the processor's: the same type (sorted
// set), member and score (admission time in ns), TTL (twice the window),
// sliding window and limit semantics (an overflow is not counted), so
// celflow's and the processor's admissions add up in one key and neither
// ever meets WRONGTYPE. (With the former INCR counter the processor's
// first acquire after one celflow request failed with WRONGTYPE.)
func TestQuotaKeySharedWithLLMDAsync(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	t0 := time.Unix(1764044000, 123456789)
	now := t0
	l := NewLLMD(rdb, LLMDConfig{Now: func() time.Time { return now }})
	const key, window, limit = "quota:userid:team-a", 10 * time.Second, 3

	type step struct {
		who     string        // "celflow" or "ap"
		at      time.Duration // after t0
		want    bool          // reserved
		members []int64       // the golden set afterwards: scores = members, ns
	}
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	steps := []step{
		{"celflow", 0, true, []int64{ns(0)}},
		{"ap", time.Second, true, []int64{ns(0), ns(time.Second)}},
		{"celflow", 2 * time.Second, true, []int64{ns(0), ns(time.Second), ns(2 * time.Second)}},
		// At the limit: both refuse, and neither counts the refusal.
		{"ap", 3 * time.Second, false, []int64{ns(0), ns(time.Second), ns(2 * time.Second)}},
		{"celflow", 4 * time.Second, false, []int64{ns(0), ns(time.Second), ns(2 * time.Second)}},
		// The window slides: at t0+10s the first admission (score <= now-window) leaves.
		{"celflow", window, true, []int64{ns(time.Second), ns(2 * time.Second), ns(window)}},
		{"ap", window + 500*time.Millisecond, false, []int64{ns(time.Second), ns(2 * time.Second), ns(window)}},
		{"ap", window + time.Second + time.Nanosecond, true, []int64{ns(2 * time.Second), ns(window), ns(window + time.Second + time.Nanosecond)}},
	}
	for i, s := range steps {
		now = t0.Add(s.at)
		var got bool
		var err error
		if s.who == "celflow" {
			got, err = l.TakeQuota(ctx, key, limit, window)
		} else {
			got, err = apAcquire(ctx, rdb, key, limit, window, now)
		}
		if err != nil || got != s.want {
			t.Fatalf("step %d (%s at +%v): reserved %v err %v, want %v", i, s.who, s.at, got, err, s.want)
		}
		if typ := rdb.Type(ctx, key).Val(); typ != "zset" {
			t.Fatalf("step %d: type %q, want zset", i, typ)
		}
		zs := rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
		if len(zs) != len(s.members) {
			t.Fatalf("step %d: set %v, want %v", i, zs, s.members)
		}
		for j, z := range zs {
			if z.Member != strconv.FormatInt(s.members[j], 10) || z.Score != float64(s.members[j]) {
				t.Fatalf("step %d: member %d is %v/%v, want %d scored alike", i, j, z.Member, z.Score, s.members[j])
			}
		}
		if ttl := rdb.TTL(ctx, key).Val(); ttl <= window || ttl > 2*window {
			t.Fatalf("step %d: ttl %v, want twice the window", i, ttl)
		}
	}

	// A zero-second window (under a second): the gate's one-hour TTL.
	if _, err := l.TakeQuota(ctx, "quota:userid:tiny", 1, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.TTL(ctx, "quota:userid:tiny").Val(); ttl <= 3590*time.Second {
		t.Fatalf("sub-second window ttl %v, want 3600s", ttl)
	}
	// The builtin back end keeps the same key type.
	b := NewBuiltin(rdb, BuiltinConfig{})
	if ok, err := b.TakeQuota(ctx, "quota:userid:b", 1, time.Minute); !ok || err != nil {
		t.Fatalf("builtin %v %v", ok, err)
	}
	if typ := rdb.Type(ctx, "quota:userid:b").Val(); typ != "zset" {
		t.Fatalf("builtin type %q", typ)
	}
	if ok, err := apAcquire(ctx, rdb, "quota:userid:b", 1, time.Minute, time.Now()); ok || err != nil {
		t.Fatalf("the gate after the builtin's admission: %v %v, want a clean overflow", ok, err)
	}
}
