package async

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// BuiltinConfig configures the Streams back end. Zero values take the
// defaults in brackets.
type BuiltinConfig struct {
	Prefix        string        // key prefix ["celflow:async:"]
	Group         string        // consumer group ["celflow"]
	Queues        []string      // every queue a dispatcher drains ["default"]
	Lanes         []string      // lanes (tiers) in priority order, first served first ["interactive","async","batch"]
	ResultTTL     time.Duration // a result's life after it is written [24h]
	Grace         time.Duration // a result's remaining life after its first fetch [60s]
	MaxDeliveries int           // runs started before dead-lettering [3]
	Lease         time.Duration // a claim not renewed for this long is redelivered [30s]
	TenantBacklog int           // queued+running per tenant, 0 = unbounded
	QueueBacklog  int           // queued+running per queue, 0 = unbounded
}

func (c *BuiltinConfig) defaults() {
	if c.Prefix == "" {
		c.Prefix = "celflow:async:"
	}
	if c.Group == "" {
		c.Group = "celflow"
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{"default"}
	}
	if len(c.Lanes) == 0 {
		c.Lanes = []string{"interactive", "async", "batch"}
	}
	if c.ResultTTL <= 0 {
		c.ResultTTL = 24 * time.Hour
	}
	if c.Grace <= 0 {
		c.Grace = 60 * time.Second
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = 3
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
}

// Builtin is the Redis Streams back end (see the package comment).
type Builtin struct {
	rdb redis.UniversalClient
	cfg BuiltinConfig
	ev  *events

	sweepMu   sync.Mutex
	lastSweep time.Time

	// stash holds entries delivered to a consumer whose claim script
	// failed (Redis refused the write, the connection dropped): they sit in
	// that consumer's pending list, and the next Claim retries them first
	// instead of leaving them to a redelivery after the lease.
	stashMu sync.Mutex
	stash   map[string][]stashed
}

// NewBuiltin wraps a client; Ensure creates the consumer groups.
func NewBuiltin(rdb redis.UniversalClient, cfg BuiltinConfig) *Builtin {
	cfg.defaults()
	b := &Builtin{rdb: rdb, cfg: cfg}
	b.ev = newEvents(rdb, cfg.Prefix+"events")
	return b
}

// Config returns the effective configuration.
func (b *Builtin) Config() BuiltinConfig { return b.cfg }

// Client is the underlying Redis client.
func (b *Builtin) Client() redis.UniversalClient { return b.rdb }

func (b *Builtin) jobKey(tenant, id string) string { return b.cfg.Prefix + "job:" + tenant + ":" + id }
func (b *Builtin) tenantKey(t string) string       { return b.cfg.Prefix + "backlog:t:" + t }
func (b *Builtin) queueKey(q string) string        { return b.cfg.Prefix + "backlog:q:" + q }

// Stream is the key of one queue's lane.
func (b *Builtin) Stream(queue, lane string) string { return b.cfg.Prefix + "q:" + queue + ":" + lane }

// DeadLetters is the dead-letter stream's key.
func (b *Builtin) DeadLetters() string { return b.cfg.Prefix + "dead" }

func (b *Builtin) chan_() string { return b.cfg.Prefix + "events" }

// Ensure creates every stream's consumer group (idempotent). A group that
// exists is left alone without a write: XGROUP CREATE is refused by a Redis
// at its memory limit even when the group exists, and a replica started
// then must still be able to start.
func (b *Builtin) Ensure(ctx context.Context) error {
	for _, q := range b.cfg.Queues {
		for _, l := range b.cfg.Lanes {
			s := b.Stream(q, l)
			if b.hasGroup(ctx, s) {
				continue
			}
			err := b.rdb.XGroupCreateMkStream(ctx, s, b.cfg.Group, "0").Err()
			if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
				return err
			}
		}
	}
	return nil
}

func (b *Builtin) hasGroup(ctx context.Context, stream string) bool {
	gs, err := b.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return false
	}
	for _, g := range gs {
		if g.Name == b.cfg.Group {
			return true
		}
	}
	return false
}

// HasQueue reports whether q is one of the configured queues.
func (b *Builtin) HasQueue(q string) bool { return contains(b.cfg.Queues, q) }

// HasLane reports whether l is one of the configured lanes.
func (b *Builtin) HasLane(l string) bool { return contains(b.cfg.Lanes, l) }

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// Hash is the idempotency hash of a body.
func Hash(body []byte) string {
	s := sha256.Sum256(body)
	return hex.EncodeToString(s[:])
}

// Submit implements Backend.
func (b *Builtin) Submit(ctx context.Context, j *Job) (Submitted, error) {
	if !validName(j.Tenant) || !validName(j.ID) || !validName(j.Queue) {
		return Submitted{}, ErrBadName
	}
	lane := j.Lane
	if lane == "" {
		lane = b.cfg.Lanes[0]
	}
	if !b.HasQueue(j.Queue) || !b.HasLane(lane) {
		return Submitted{}, fmt.Errorf("%w: queue %q lane %q is not configured", ErrBadName, j.Queue, lane)
	}
	if j.BodyHash == "" {
		j.BodyHash = Hash(j.Body)
	}
	hdr := []byte("{}")
	if len(j.Headers) > 0 {
		hdr, _ = json.Marshal(j.Headers)
	}
	ttl := time.Until(j.Deadline) + b.cfg.ResultTTL
	res, err := submitScript.Run(ctx, b.rdb,
		[]string{b.jobKey(j.Tenant, j.ID), b.tenantKey(j.Tenant), b.queueKey(j.Queue), b.Stream(j.Queue, lane)},
		j.BodyHash, j.Body, j.Path, hdr, j.Created.UnixMilli(), j.Deadline.UnixMilli(), ttl.Milliseconds(),
		b.cfg.TenantBacklog, b.cfg.QueueBacklog, j.Tenant, j.ID, j.Queue, lane).StringSlice()
	if err != nil {
		return Submitted{}, err
	}
	switch res[0] {
	case "created":
		return Submitted{Outcome: Created, State: StateQueued}, nil
	case "exists":
		return Submitted{Outcome: Reattached, State: State(res[1])}, nil
	case "conflict":
		return Submitted{Outcome: Conflict}, nil
	case "full_tenant":
		return Submitted{Outcome: FullTenant}, nil
	case "full_queue":
		return Submitted{Outcome: FullQueue}, nil
	}
	return Submitted{}, fmt.Errorf("async: submit script answered %q", res[0])
}

// Fetch implements Backend.
func (b *Builtin) Fetch(ctx context.Context, tenant, id string) (Record, error) {
	if !validName(tenant) || !validName(id) {
		return Record{}, ErrBadName
	}
	res, err := fetchScript.Run(ctx, b.rdb, []string{b.jobKey(tenant, id)}, b.cfg.Grace.Milliseconds()).Slice()
	if err != nil {
		return Record{}, err
	}
	return parseFetch(res), nil
}

func parseFetch(res []any) Record {
	str := func(i int) string {
		if i < len(res) {
			if s, ok := res[i].(string); ok {
				return s
			}
		}
		return ""
	}
	switch st := str(0); st {
	case "unknown", "":
		return Record{}
	case "done":
		status, _ := strconv.Atoi(str(1))
		return Record{State: StateDone, Result: Result{Status: status, Body: []byte(str(2)), Code: str(3), Message: str(4)}}
	default:
		ms, _ := strconv.ParseInt(str(1), 10, 64)
		r := Record{State: State(st)}
		if ms > 0 {
			r.Deadline = time.UnixMilli(ms)
		}
		return r
	}
}

// Cancel implements Backend.
func (b *Builtin) Cancel(ctx context.Context, tenant, id string, keep bool) error {
	if !validName(tenant) || !validName(id) {
		return ErrBadName
	}
	// The backlog keys need the queue: read it first (a queued job's queue
	// never changes).
	q, err := b.rdb.HGet(ctx, b.jobKey(tenant, id), "queue").Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return err
	}
	k := "0"
	if keep {
		k = "1"
	}
	return cancelScript.Run(ctx, b.rdb, []string{b.jobKey(tenant, id), b.tenantKey(tenant), b.queueKey(q)},
		k, b.chan_(), tenant+":"+id, b.cfg.ResultTTL.Milliseconds()).Err()
}

// Watch implements Backend.
func (b *Builtin) Watch(tenant, id string) (<-chan struct{}, func()) {
	return b.ev.watch(tenant + ":" + id)
}

// OnCancel registers the hook called with "tenant:id" when a cancel is
// published (the dispatcher aborts the run if it holds it).
func (b *Builtin) OnCancel(f func(member string)) { b.ev.setCancelHook(f) }

// Close stops the event subscription; the Redis client is the caller's.
func (b *Builtin) Close() error { b.ev.close(); return nil }

var _ Backend = (*Builtin)(nil)
