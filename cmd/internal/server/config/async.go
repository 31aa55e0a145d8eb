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
	MaxWaiters     int
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

// decodeAsync reads the async section over the defaults in a (Defaults).
func decodeAsync(a *Async, d *asyncDoc) {
	keep(&a.RedisURL, d.RedisURL)
	keep(&a.Backend, d.Backend)
	keep(&a.KeyPrefix, d.KeyPrefix)
	keep(&a.Queues, d.Queues)
	keep(&a.Tiers, d.Tiers)
	keep(&a.WaitTimeout, d.Timeouts.Wait)
	keep(&a.WaitMax, d.Timeouts.WaitMax)
	keep(&a.EnqueueTimeout, d.Timeouts.Enqueue)
	keep(&a.WaitCap, d.WaitCap)
	keep(&a.MaxWaiters, d.MaxWaiters)
	keep(&a.FetchGrace, d.FetchGrace)
	keep(&a.ResultTTL, d.ResultTTL)
	keep(&a.MaxDeliveries, d.MaxDeliveries)
	keep(&a.Lease, d.Lease)
	keep(&a.PollInterval, d.PollInterval)
	keep(&a.MaxInlineBytes, d.MaxInlineBytes)
	keep(&a.TenantBacklog, d.Backlog.PerTenant)
	keep(&a.QueueBacklog, d.Backlog.PerQueue)
	keep(&a.Dispatcher, d.Dispatcher.Enabled)
	keep(&a.Concurrency, d.Dispatcher.Concurrency)
	keep(&a.Budget, d.Dispatcher.Budget)
}
