package async

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// quotaScript: INCR, and start the window on the first request.
var quotaScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
`)

func countQuota(ctx context.Context, rdb redis.UniversalClient, key string, window time.Duration) (int64, error) {
	return quotaScript.Run(ctx, rdb, []string{key}, window.Milliseconds()).Int64()
}

// CountQuota implements QuotaCounter.
func (b *Builtin) CountQuota(ctx context.Context, key string, window time.Duration) (int64, error) {
	return countQuota(ctx, b.rdb, key, window)
}

// CountQuota implements QuotaCounter.
func (l *LLMD) CountQuota(ctx context.Context, key string, window time.Duration) (int64, error) {
	return countQuota(ctx, l.rdb, key, window)
}

var (
	_ QuotaCounter = (*Builtin)(nil)
	_ QuotaCounter = (*LLMD)(nil)
)
