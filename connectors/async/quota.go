package async

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The quota counter is llm-d-async's redis-quota gate in its default mode
// (rate-limit), so that a celflow passthrough and an llm-d-async processor
// can share the key <prefix><attribute>:<tenant> (docs/async.md, Quota).
// The processor keeps a sliding window in a sorted set: per admitted
// request one member, the admission time in Unix nanoseconds as a decimal
// string, scored by the same number; before counting it removes members
// scored at or below now-window (ZREMRANGEBYSCORE 0 now-window), then
// admits only while ZCARD < limit (a refused request is not counted), and
// after admitting sets EXPIRE to twice the window in whole seconds (3600
// when that is 0). Any other type under the key (celflow once kept a plain
// INCR counter there) makes the processor fail with WRONGTYPE on every
// request of that tenant for the key's life, hence the exact match.
//
// KEYS key; ARGV min-score (now-window, ns) limit now (ns) ttl (s).
var quotaScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
`)

// takeQuota admits one request at now: true (reserved) when fewer than
// limit requests were admitted in the window before it, and it is counted;
// false (overflow), not counted.
func takeQuota(ctx context.Context, rdb redis.UniversalClient, key string, limit int64, window time.Duration, now time.Time) (bool, error) {
	ns := now.UnixNano()
	ttl := int64(window/time.Second) * 2
	if ttl <= 0 {
		ttl = 3600
	}
	n, err := quotaScript.Run(ctx, rdb, []string{key},
		strconv.FormatInt(ns-window.Nanoseconds(), 10), limit, strconv.FormatInt(ns, 10), ttl).Int64()
	return n == 1, err
}

// TakeQuota implements QuotaCounter.
func (b *Builtin) TakeQuota(ctx context.Context, key string, limit int64, window time.Duration) (bool, error) {
	return takeQuota(ctx, b.rdb, key, limit, window, time.Now())
}

// TakeQuota implements QuotaCounter.
func (l *LLMD) TakeQuota(ctx context.Context, key string, limit int64, window time.Duration) (bool, error) {
	return takeQuota(ctx, l.rdb, key, limit, window, l.cfg.Now())
}

var (
	_ QuotaCounter = (*Builtin)(nil)
	_ QuotaCounter = (*LLMD)(nil)
)
