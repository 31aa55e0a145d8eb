package config

import "time"

// Async is the `async:` section (docs/async.md). Enabled when RedisURL is set.
type Async struct {
	RedisURL       string
	Backend        string // builtin (default) or llm-d-async
	KeyPrefix      string
	Queues         []string
	Tiers          []string
	WaitTimeout    time.Duration
	WaitMax        time.Duration
	EnqueueTimeout time.Duration
	WaitCap        time.Duration
	FetchGrace     time.Duration
	ResultTTL      time.Duration
	MaxDeliveries  int
	Lease          time.Duration
	PollInterval   time.Duration
	MaxInlineBytes int
	TenantBacklog  int
	QueueBacklog   int
	Dispatcher     bool
	Concurrency    int
	Budget         int
}

// Enabled reports whether async requests are configured. Its defaults are
// in Defaults.
func (a Async) Enabled() bool { return a.RedisURL != "" }

// decodeAsync reads the async section over the defaults decode put in
// c.Async (Defaults).
func (c *Config) decodeAsync(v values) {
	a := &c.Async
	v.str("/async/redis_url", &a.RedisURL)
	v.str("/async/backend", &a.Backend)
	v.str("/async/key_prefix", &a.KeyPrefix)
	v.list("/async/queues", &a.Queues)
	v.list("/async/tiers", &a.Tiers)
	v.dur("/async/timeouts/wait", &a.WaitTimeout)
	v.dur("/async/timeouts/wait_max", &a.WaitMax)
	v.dur("/async/timeouts/enqueue", &a.EnqueueTimeout)
	v.dur("/async/wait_cap", &a.WaitCap)
	v.dur("/async/fetch_grace", &a.FetchGrace)
	v.dur("/async/result_ttl", &a.ResultTTL)
	v.int("/async/max_deliveries", &a.MaxDeliveries)
	v.dur("/async/lease", &a.Lease)
	v.dur("/async/poll_interval", &a.PollInterval)
	v.int("/async/max_inline_bytes", &a.MaxInlineBytes)
	v.int("/async/backlog/per_tenant", &a.TenantBacklog)
	v.int("/async/backlog/per_queue", &a.QueueBacklog)
	v.bool("/async/dispatcher/enabled", &a.Dispatcher)
	v.int("/async/dispatcher/concurrency", &a.Concurrency)
	v.int("/async/dispatcher/budget", &a.Budget)
}
