package async

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Delivery is one claimed request: the claimer runs it and then calls
// Finish (or Requeue); while it runs it calls Renew every Lease/3.
type Delivery struct {
	Tenant, ID   string
	Queue, Lane  string
	Stream       string
	Entry        string // stream entry id
	Path         string
	Body         []byte
	Headers      map[string]string
	Deadline     time.Time
	Deliveries   int  // runs started, this one included (Redis's delivery counter is not used: a claim Redis refused is no run)
	Redelivered  bool // came from XAUTOCLAIM (another claimer held it)
	consumer     string
	tenantKey    string
	queueBacklog string
}

// Claimed counts what one Claim call saw besides the deliveries it returns.
type Claimed struct {
	Skipped, DeadLettered, Redelivered int
}

// stashed is an entry delivered to a consumer but not yet through the claim
// script (see Builtin.stash).
type stashed struct {
	q, l, s     string
	m           redis.XMessage
	redelivered bool
}

// Claim takes up to n requests for consumer: first entries delivered to it
// earlier whose claim script failed, then entries whose claimer stopped
// renewing (XAUTOCLAIM, at most every Lease/4), then new entries lane by
// lane in priority order, queue by queue. With nothing new and block > 0 it
// waits up to block for one.
//
// An error (Redis refusing writes, at its memory limit or read-only; a
// dropped connection) leaves every entry this call had been delivered in
// the stash: the next call retries them, and neither the failed attempts
// nor Redis's own delivery counter count towards max_deliveries (runs do).
func (b *Builtin) Claim(ctx context.Context, consumer string, n int, block time.Duration) ([]*Delivery, Claimed, error) {
	var out []*Delivery
	var st Claimed
	if pend := b.takeStash(consumer); len(pend) > 0 {
		k := min(n, len(pend))
		got, err := b.claimAll(ctx, consumer, pend[:k], &st)
		out = append(out, got...)
		b.putStash(consumer, pend[k:])
		if err != nil || len(out) >= n {
			return out, st, err
		}
	}
	if b.sweepDue() {
		for _, l := range b.cfg.Lanes {
			for _, q := range b.cfg.Queues {
				if len(out) >= n {
					return out, st, nil
				}
				s := b.Stream(q, l)
				msgs, _, err := b.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: s, Group: b.cfg.Group,
					MinIdle: b.cfg.Lease, Start: "0-0", Count: int64(n - len(out)), Consumer: consumer}).Result()
				if err != nil && !errors.Is(err, redis.Nil) {
					return out, st, err
				}
				got, err := b.claimAll(ctx, consumer, entries(q, l, s, msgs, true), &st)
				out = append(out, got...)
				if err != nil {
					return out, st, err
				}
			}
		}
	}
	for _, l := range b.cfg.Lanes {
		for _, q := range b.cfg.Queues {
			if len(out) >= n {
				return out, st, nil
			}
			got, err := b.read(ctx, consumer, q, l, n-len(out), -1, &st)
			out = append(out, got...)
			if err != nil {
				return out, st, err
			}
		}
	}
	if len(out) == 0 && block > 0 {
		// Nothing anywhere: block on every stream at once for one entry;
		// the next call scans in priority order again.
		got, err := b.readAny(ctx, consumer, block, &st)
		return got, st, err
	}
	return out, st, nil
}

func entries(q, l, s string, msgs []redis.XMessage, redelivered bool) []stashed {
	out := make([]stashed, len(msgs))
	for i, m := range msgs {
		out[i] = stashed{q: q, l: l, s: s, m: m, redelivered: redelivered}
	}
	return out
}

// claimAll runs the claim script on each entry; at the first error the
// entry and those after it go to the stash.
func (b *Builtin) claimAll(ctx context.Context, consumer string, es []stashed, st *Claimed) ([]*Delivery, error) {
	var out []*Delivery
	for i, e := range es {
		d, err := b.claimOne(ctx, consumer, e.q, e.l, e.s, e.m, st)
		if err != nil {
			b.putStash(consumer, es[i:])
			return out, err
		}
		if d != nil {
			if e.redelivered {
				d.Redelivered = true
				st.Redelivered++
			}
			out = append(out, d)
		}
	}
	return out, nil
}

func (b *Builtin) takeStash(consumer string) []stashed {
	b.stashMu.Lock()
	defer b.stashMu.Unlock()
	es := b.stash[consumer]
	delete(b.stash, consumer)
	return es
}

// putStash keeps es for consumer's next Claim (after what is there: the
// stash keeps delivery order).
func (b *Builtin) putStash(consumer string, es []stashed) {
	if len(es) == 0 {
		return
	}
	b.stashMu.Lock()
	defer b.stashMu.Unlock()
	if b.stash == nil {
		b.stash = map[string][]stashed{}
	}
	b.stash[consumer] = append(b.stash[consumer], es...)
}

// Stashed is the number of entries delivered to consumer that wait for a
// retry of their claim (tests, metrics).
func (b *Builtin) Stashed(consumer string) int {
	b.stashMu.Lock()
	defer b.stashMu.Unlock()
	return len(b.stash[consumer])
}

// readAny blocks up to block for one new entry of any stream.
func (b *Builtin) readAny(ctx context.Context, consumer string, block time.Duration, st *Claimed) ([]*Delivery, error) {
	type lane struct{ q, l string }
	var streams []string
	where := map[string]lane{}
	for _, l := range b.cfg.Lanes {
		for _, q := range b.cfg.Queues {
			s := b.Stream(q, l)
			streams = append(streams, s)
			where[s] = lane{q, l}
		}
	}
	n := len(streams)
	for i := 0; i < n; i++ {
		streams = append(streams, ">")
	}
	res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.cfg.Group, Consumer: consumer,
		Streams: streams, Count: 1, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var es []stashed
	for _, str := range res {
		w := where[str.Stream]
		es = append(es, entries(w.q, w.l, str.Stream, str.Messages, false)...)
	}
	return b.claimAll(ctx, consumer, es, st)
}

func (b *Builtin) sweepDue() bool {
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	if time.Since(b.lastSweep) < b.cfg.Lease/4 {
		return false
	}
	b.lastSweep = time.Now()
	return true
}

// read claims new entries of one stream; block < 0 does not block.
func (b *Builtin) read(ctx context.Context, consumer, q, l string, n int, block time.Duration, st *Claimed) ([]*Delivery, error) {
	s := b.Stream(q, l)
	res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.cfg.Group, Consumer: consumer,
		Streams: []string{s, ">"}, Count: int64(n), Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var es []stashed
	for _, str := range res {
		es = append(es, entries(q, l, s, str.Messages, false)...)
	}
	return b.claimAll(ctx, consumer, es, st)
}

// claimOne runs the claim script on one delivered entry: it ends the
// request there (cancelled, past its deadline, dead-lettered, deleted) or
// marks it in progress and returns it.
func (b *Builtin) claimOne(ctx context.Context, consumer, q, l, s string, m redis.XMessage, st *Claimed) (*Delivery, error) {
	tenant, _ := m.Values["t"].(string)
	id, _ := m.Values["i"].(string)
	if !validName(tenant) || !validName(id) {
		// Not ours: acknowledge it so it never loops.
		b.rdb.XAck(ctx, s, b.cfg.Group, m.ID)
		st.Skipped++
		return nil, nil
	}
	d := &Delivery{Tenant: tenant, ID: id, Queue: q, Lane: l, Stream: s, Entry: m.ID, consumer: consumer,
		tenantKey: b.tenantKey(tenant), queueBacklog: b.queueKey(q)}
	res, err := claimScript.Run(ctx, b.rdb,
		[]string{s, b.jobKey(tenant, id), d.tenantKey, d.queueBacklog, b.DeadLetters()},
		b.cfg.Group, consumer, m.ID, time.Now().UnixMilli(), b.cfg.MaxDeliveries,
		b.cfg.ResultTTL.Milliseconds(), b.chan_(), tenant+":"+id).Slice()
	if err != nil {
		return nil, err
	}
	switch res[0] {
	case "run":
		d.Path, _ = res[1].(string)
		body, _ := res[2].(string)
		d.Body = []byte(body)
		if h, _ := res[3].(string); h != "" && h != "{}" {
			_ = json.Unmarshal([]byte(h), &d.Headers)
		}
		ms, _ := strconv.ParseInt(res[4].(string), 10, 64)
		d.Deadline = time.UnixMilli(ms)
		d.Deliveries, _ = strconv.Atoi(res[5].(string))
		return d, nil
	case "dead":
		st.DeadLettered++
	default:
		st.Skipped++
	}
	return nil, nil
}

// Finish stores d's result if d's claimer still owns it; false means it was
// fenced (the claim was taken over, or the request ended otherwise) and the
// result was dropped.
func (b *Builtin) Finish(ctx context.Context, d *Delivery, r Result) (bool, error) {
	n, err := finishScript.Run(ctx, b.rdb,
		[]string{d.Stream, b.jobKey(d.Tenant, d.ID), d.tenantKey, d.queueBacklog},
		b.cfg.Group, d.consumer, d.Entry, r.Status, r.Body, r.Code, r.Message,
		b.cfg.ResultTTL.Milliseconds(), b.chan_(), d.Tenant+":"+d.ID).Int()
	return n == 1, err
}

// Renew extends d's claim (resets its idle time). lost: another claimer
// took it over; cancel: a cancel was asked for.
func (b *Builtin) Renew(ctx context.Context, d *Delivery) (lost, cancel bool, err error) {
	n, err := renewScript.Run(ctx, b.rdb, []string{d.Stream, b.jobKey(d.Tenant, d.ID)},
		b.cfg.Group, d.consumer, d.Entry).Int()
	return n == -1, n == 1, err
}

// Requeue puts d back at the end of its lane (a worker refused it for
// load); false when the claim was lost meanwhile.
func (b *Builtin) Requeue(ctx context.Context, d *Delivery) (bool, error) {
	n, err := requeueScript.Run(ctx, b.rdb, []string{d.Stream, b.jobKey(d.Tenant, d.ID)},
		b.cfg.Group, d.consumer, d.Entry).Int()
	return n == 1, err
}

// Depth is one lane's backlog: entries never delivered plus pending ones,
// and the age of the oldest entry (0 when empty).
type Depth struct {
	Queue, Lane string
	Length      int64
	OldestAge   time.Duration
}

// Depths reads every lane's length and oldest entry (metrics).
func (b *Builtin) Depths(ctx context.Context) ([]Depth, error) {
	var out []Depth
	for _, q := range b.cfg.Queues {
		for _, l := range b.cfg.Lanes {
			s := b.Stream(q, l)
			n, err := b.rdb.XLen(ctx, s).Result()
			if err != nil {
				return out, err
			}
			d := Depth{Queue: q, Lane: l, Length: n}
			if n > 0 {
				if m, err := b.rdb.XRangeN(ctx, s, "-", "+", 1).Result(); err == nil && len(m) == 1 {
					if ms, err := strconv.ParseInt(m[0].ID[:indexByte(m[0].ID, '-')], 10, 64); err == nil {
						d.OldestAge = time.Since(time.UnixMilli(ms))
					}
				}
			}
			out = append(out, d)
		}
	}
	return out, nil
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return len(s)
}
