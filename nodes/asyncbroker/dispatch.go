package asyncbroker

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/connectors/async"
)

// dispatchKey marks a request the dispatcher feeds back through the
// front: a context value, so no client header can fake it.
type dispatchKey struct{}

type dispatched struct{ tenant, tier string }

// DispatcherOptions configure the builtin back end's dispatcher.
type DispatcherOptions struct {
	Handler     http.Handler // the front's root handler (front.Server.Handler)
	View        InFlightView // per-pool in-flight legs; nil: no gate but Concurrency
	Roles       []string     // pools the gate watches [encode, prefill, decode]
	Budget      int          // in-flight legs per pool below which queued work may start [8]
	Concurrency int          // queued requests one replica runs at once [16]
	RetryAfter  time.Duration
	Consumer    string // consumer name in the group [host-pid-random]
}

// Dispatcher runs queued requests of the builtin back end through the
// workflow, in every serve replica.
type Dispatcher struct {
	rt   *Runtime
	b    *async.Builtin
	o    DispatcherOptions
	gate *gate
	log  *logrus.Logger

	mu      sync.Mutex
	running map[string]*job // tenant:id → the run this replica holds
	wg      sync.WaitGroup
	slots   chan struct{}

	claimErrs    int // failed claims since the last log line
	lastClaimLog time.Time
}

type job struct {
	cancel    context.CancelFunc
	cancelled bool // a cancel was asked for (not the deadline, not a lost claim)
	lost      bool
	shutdown  bool // cut by the end of the drain: left for redelivery
}

// NewDispatcher builds a dispatcher over the runtime's builtin back end.
func NewDispatcher(rt *Runtime, b *async.Builtin, o DispatcherOptions) *Dispatcher {
	if o.Budget <= 0 {
		o.Budget = 8
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Roles == nil {
		o.Roles = []string{"encode", "prefill", "decode"}
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.Consumer == "" {
		host, _ := os.Hostname()
		o.Consumer = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	d := &Dispatcher{rt: rt, b: b, o: o, gate: newGate(o.View, o.Roles, o.Budget), log: rt.Log,
		running: map[string]*job{}, slots: make(chan struct{}, o.Concurrency)}
	b.OnCancel(d.cancel)
	return d
}

// Run claims and runs queued requests until ctx ends, then waits for the
// runs it holds (they are cancelled when drain expires; their claims are
// redelivered elsewhere after the lease).
func (d *Dispatcher) Run(ctx context.Context, drain time.Duration) {
	go d.rt.Metrics.pollDepths(ctx, d.b, 5*time.Second)
	idle := 50 * time.Millisecond
	// While Redis refuses (at its memory limit, read-only, loading, or
	// away) claims back off, jittered and capped, instead of hammering it;
	// the first success resets the pause.
	bo := async.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	ensured := false
	for ctx.Err() == nil {
		if !ensured {
			// The consumer groups: created here too (not only at start-up)
			// so a Redis that lost them (restarted without AOF) gets them
			// back and a replica started while Redis refused writes starts
			// once it accepts them.
			if err := d.b.Ensure(ctx); err != nil {
				if ctx.Err() == nil {
					d.log.WithError(err).Warn("async: cannot create the consumer groups; retrying")
					sleep(ctx, bo.Next())
				}
				continue
			}
			ensured = true
		}
		d.rt.Metrics.gauge(d.gate.budget(), len(d.slots))
		free := min(d.o.Concurrency-len(d.slots), d.gate.spare(time.Now()))
		if free <= 0 {
			sleep(ctx, idle)
			continue
		}
		ds, st, err := d.b.Claim(ctx, d.o.Consumer, free, 200*time.Millisecond)
		// What was claimed before an error runs all the same.
		d.rt.Metrics.claimed(len(ds), st)
		for _, dl := range ds {
			d.start(dl)
		}
		if err != nil {
			if ctx.Err() == nil {
				if strings.Contains(err.Error(), "NOGROUP") {
					ensured = false
				}
				d.rt.Metrics.claimErrorInc()
				d.logClaimError(err)
				sleep(ctx, bo.Next())
			}
			continue
		}
		bo.Reset()
	}
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		d.mu.Lock()
		for _, j := range d.running {
			j.shutdown = true
			j.cancel()
		}
		d.mu.Unlock()
		<-done
	}
}

// logClaimError logs a failed claim at most once per 10 s (with the count
// of those not logged): a Redis that refuses writes for minutes fails every
// claim, and one line per failure would flood the log.
func (d *Dispatcher) logClaimError(err error) {
	d.mu.Lock()
	d.claimErrs++
	now := time.Now()
	if now.Sub(d.lastClaimLog) < 10*time.Second {
		d.mu.Unlock()
		return
	}
	n := d.claimErrs
	d.claimErrs, d.lastClaimLog = 0, now
	d.mu.Unlock()
	d.log.WithError(err).WithField("failures", n).Warn("async: claim failed (backing off; queued requests are kept and retried)")
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// cancel is the cross-replica cancel hook (pub/sub): abort the run if
// this replica holds it.
func (d *Dispatcher) cancel(member string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j := d.running[member]; j != nil {
		j.cancelled = true
		j.cancel()
	}
}

func (d *Dispatcher) start(dl *async.Delivery) {
	d.slots <- struct{}{}
	d.wg.Add(1)
	// The run's life is the request's deadline, not the claim loop's: a
	// shutdown lets it finish (Run's drain).
	ctx, cancel := context.WithDeadline(context.Background(), dl.Deadline)
	j := &job{cancel: cancel}
	member := dl.Tenant + ":" + dl.ID
	d.mu.Lock()
	d.running[member] = j
	d.mu.Unlock()
	go func() {
		defer func() {
			d.mu.Lock()
			delete(d.running, member)
			d.mu.Unlock()
			cancel()
			<-d.slots
			d.wg.Done()
		}()
		d.execute(ctx, dl, j)
	}()
}

// execute runs one delivery through the front handler, renewing the claim
// meanwhile, and stores its result (fenced).
func (d *Dispatcher) execute(ctx context.Context, dl *async.Delivery, j *job) {
	stopRenew := d.renew(ctx, dl, j)
	// The gate is checked again at dispatch: online load may have arrived
	// while the claim was in flight. The claim is renewed meanwhile.
	for d.gate.spare(time.Now()) == 0 && ctx.Err() == nil {
		sleep(ctx, 20*time.Millisecond)
	}
	rec := d.serve(ctx, dl)
	stopRenew()
	d.mu.Lock()
	cancelled, lost, shutdown := j.cancelled, j.lost, j.shutdown
	d.mu.Unlock()
	var res async.Result
	switch {
	case lost:
		return // another claimer has it: nothing of ours may land
	case shutdown:
		return // not finished here: another replica redelivers it after the lease
	case cancelled:
		res = async.Result{Code: async.CodeCancelled, Message: "cancelled while running"}
	case ctx.Err() != nil:
		res = async.Result{Code: async.CodeDeadline, Message: "deadline exceeded while running"}
	case rec.status == http.StatusTooManyRequests || rec.status == http.StatusServiceUnavailable:
		// A worker (or this replica's draining front) refused it for load:
		// back off and put it back, not counted as a delivery.
		d.gate.refused(time.Now(), retryAfter(rec.header, d.o.RetryAfter))
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := d.b.Requeue(c, dl); err != nil {
			d.log.WithError(err).WithField("request_id", dl.ID).Warn("async: requeue failed (redelivered after the lease)")
		}
		return
	case rec.status == 0:
		res = async.Result{Code: async.CodeInference, Message: "the workflow gave no answer"}
	default:
		res = async.Result{Status: rec.status, Body: rec.body.Bytes()}
	}
	ok, err := d.finish(dl, res, j)
	switch {
	case err != nil:
		d.log.WithError(err).WithField("request_id", dl.ID).Warn("async: storing the result failed (redelivered after the lease)")
	case !ok:
		d.rt.Metrics.fencedInc()
		d.log.WithField("request_id", dl.ID).Info("async: result dropped: the claim was taken over")
	default:
		d.gate.succeeded()
	}
}

// finishRetryFor bounds how long a finished run keeps trying to store its
// result while Redis refuses (a Redis at its memory limit refuses the
// write, but not the renew that keeps the claim): a Redis-full episode is
// minutes, and giving up means running the request again.
const finishRetryFor = 5 * time.Minute

// finish stores the result, retrying with backoff while Redis fails and
// the claim is still held (renewed meanwhile), until finishRetryFor, the
// end of the drain, or a lost claim.
func (d *Dispatcher) finish(dl *async.Delivery, res async.Result, j *job) (bool, error) {
	var stopRenew func()
	defer func() {
		if stopRenew != nil {
			stopRenew()
		}
	}()
	bo := async.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	start := time.Now()
	for {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := d.b.Finish(c, dl, res)
		cancel()
		if err == nil {
			return ok, nil
		}
		d.mu.Lock()
		lost, shutdown := j.lost, j.shutdown
		d.mu.Unlock()
		if lost || shutdown || time.Since(start) > finishRetryFor {
			return false, err
		}
		if stopRenew == nil {
			// The run's context may be over (its deadline): renew under
			// one of our own while we retry.
			rctx, rcancel := context.WithCancel(context.Background())
			stop := d.renew(rctx, dl, j)
			stopRenew = func() { rcancel(); stop() }
		}
		d.rt.Metrics.claimErrorInc()
		time.Sleep(bo.Next())
	}
}

// renew keeps the claim alive every Lease/3 and learns of cancels even
// when pub/sub missed one.
func (d *Dispatcher) renew(ctx context.Context, dl *async.Delivery, j *job) func() {
	every := d.b.Config().Lease / 3
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			lost, cancel, err := d.b.Renew(rctx, dl)
			if err != nil {
				continue
			}
			if lost || cancel {
				d.mu.Lock()
				j.lost = j.lost || lost
				j.cancelled = j.cancelled || cancel
				d.mu.Unlock()
				j.cancel()
				return
			}
		}
	}()
	return func() { stop(); <-done }
}

// serve builds the synthetic request exactly as a client would send it
// (path, body, x-request-id, traceparent, forwarded headers) and runs it
// through the front's root handler: same id handling, logs, metrics,
// spans and workflow as an online request.
func (d *Dispatcher) serve(ctx context.Context, dl *async.Delivery) *recorder {
	ctx = context.WithValue(ctx, dispatchKey{}, &dispatched{tenant: dl.Tenant, tier: dl.Lane})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dl.Path, bytes.NewReader(dl.Body))
	rec := &recorder{header: http.Header{}}
	if err != nil {
		return rec
	}
	req.RequestURI = dl.Path
	req.ContentLength = int64(len(dl.Body))
	req.RemoteAddr = "async-dispatcher"
	for k, v := range dl.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", dl.ID)
	d.o.Handler.ServeHTTP(rec, req)
	return rec
}

// recorder is the dispatched request's response writer: it keeps the
// status, headers and body (queued requests never stream).
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}
func (r *recorder) Flush() {}

func retryAfter(h http.Header, def time.Duration) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return def
}
