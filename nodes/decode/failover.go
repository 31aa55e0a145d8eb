package decode

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/replay"
)

// Decode failover (docs/operations.md, Failover): when the decode leg
// breaks after its first byte, the reply goes on from another worker. A
// streamed reply continues from the tokens the client already has (a
// /v1/completions request whose prompt is the prompt's token ids followed
// by the generated ones, in P/D after a fresh prefill of that prompt by the
// workflow's own prefill node); a non-streamed one, of which the client has
// seen nothing, is made again. A decode whose prefill's KV cannot be pulled
// has its prefill made again (send, kv_pull).

// foPlan is what failover means for one request.
type foPlan struct {
	on      bool   // relay through replay (streamed: replay.Stream; else buffered)
	ids     bool   // ask the worker for token ids
	refused string // why a streamed reply cannot be continued once it has begun ("" when it can)
}

// plan decides, from the policy and the client's body, how the decode leg
// of this request is sent and relayed.
func (n *Decode) plan(x *engine.Exec, in *bodyIn) foPlan {
	if !n.fo.Enabled() {
		return foPlan{}
	}
	if n.sglang {
		return foPlan{refused: replay.RefusedSGLang}
	}
	if !x.Run.Req.Stream {
		return foPlan{on: true}
	}
	obj := in.Obj
	if obj == nil {
		var err error
		if obj, err = jsonb.Parse(in.Body); err != nil {
			return foPlan{}
		}
	}
	p := foPlan{on: true, refused: replay.Check(in.Route, obj, len(in.Media))}
	p.ids = p.refused == "" && in.Route != engine.RouteGenerate // generate always answers ids
	return p
}

// prepare adjusts a decode leg sent under failover: its body is read by
// celflow (decoded, idle-bounded by stream_idle_timeout) rather than relayed
// byte for byte.
func (p foPlan) prepare(l *upstream.Leg, idle time.Duration) {
	if !p.on {
		l.Relay = true
		return
	}
	l.Idle = idle
	l.TargetHeader = acceptEncoding(l.TargetHeader, l.Header)
}

var hvIdentity = []string{"identity"}

// acceptEncoding gives a failover leg the Accept-Encoding the plain relay's
// leg carries (docs/protocol.md: the client's on decode, identity when it
// sent none), unless a target rule sets it. Without a header of ours Go's
// transport would offer gzip itself. celflow reads that reply: a gzip one
// is decoded (relayFailover), another coding is relayed as it came,
// without failover. A rule's headers are shared by every request: they
// are copied.
func acceptEncoding(h http.Header, client http.Header) http.Header {
	if _, ok := h["Accept-Encoding"]; ok {
		return h
	}
	out := make(http.Header, len(h)+1)
	for k, v := range h {
		out[k] = v
	}
	out["Accept-Encoding"] = hvIdentity
	if ae := client.Values("Accept-Encoding"); len(ae) > 0 {
		out["Accept-Encoding"] = ae
	}
	return out
}

// readable makes a failover leg's reply readable by celflow: a gzip body is
// decoded (and its Content-Encoding dropped). false: a coding celflow does
// not read, for the plain relay.
func readable(resp *http.Response) bool {
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
		return true
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			// Not even a gzip header: the reply broke or lied; the relay
			// reads it as it came and fails as a broken reply.
			return true
		}
		resp.Body = gzipBody{zr, resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		return true
	default:
		return false
	}
}

func isGzip(ce string) bool {
	ce = strings.ToLower(strings.TrimSpace(ce))
	return ce == "gzip" || ce == "x-gzip"
}

// teeBody keeps a copy of what is read from a reply's body (raw).
type teeBody struct {
	io.Reader
	raw io.ReadCloser
}

func (t teeBody) Close() error { return t.raw.Close() }

type gzipBody struct {
	*gzip.Reader
	raw io.ReadCloser
}

func (g gzipBody) Close() error { return g.raw.Close() }

// isKVPull: the decode worker could not pull the prefill's KV.
func isKVPull(e *engine.Error) bool {
	return e.Kind == engine.KindUpstreamRejected && e.Status != http.StatusTooManyRequests && aboutKVTransfer(e.UpstreamMsg)
}

// reprefill runs the workflow's prefill node again for this request (on
// another prefill worker: the re-run avoids the endpoints its attempts
// used) and rebuilds the decode body with the new hand-off.
func (n *Decode) reprefill(ctx context.Context, x *engine.Exec, in *bodyIn, res *engine.Result) (*jsonb.Body, bool) {
	f := engine.Failover{Reason: replay.ReasonKVPull, Outcome: replay.OutcomeFailed}
	start := time.Now()
	pres, _, ok := x.Rerun(ctx, handoff.KV, x.Run)
	defer func() { res.Failovers = append(res.Failovers, f) }()
	if !ok || pres.Err != nil {
		if pres.Err != nil {
			leg.Log(x).WithError(pres.Err).Warn("decode failover: prefill again after a failed KV pull failed")
		}
		return nil, false
	}
	in.KV = handoff.KV.Value(x.Run).Params
	body, e := build(in)
	if e != nil {
		return nil, false
	}
	f.Outcome, f.Stall = replay.OutcomeContinued, time.Since(start)
	return body, true
}

// breakReason is the failover reason of a relay error.
func breakReason(err error) string {
	var e *engine.Error
	if errors.As(err, &e) && e.Kind == engine.KindUpstreamTimeout {
		return replay.ReasonIdle
	}
	return replay.ReasonReset
}

// relayFailover relays the decode reply and, when its leg breaks, goes on
// from other workers within the policy.
func (n *Decode) relayFailover(ctx context.Context, x *engine.Exec, in *bodyIn, p foPlan, resp *http.Response, t *upstream.Target, res engine.Result) engine.Result {
	if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusResetContent || resp.ContentLength == 0 {
		resp.Body.Close()
		res.Err = engine.Errorf(engine.KindBadGateway, "upstream answered HTTP %d without a body: not a valid reply", resp.StatusCode)
		return res
	}
	// A JSON reply is read whole (below); a gzip one is also kept as it
	// came, so that when it is whole it reaches the client compressed, with
	// its Content-Encoding, exactly as the plain relay passes it.
	wholeReply := !x.Run.Req.Stream || !upstream.IsEventStream(resp.Header.Get("Content-Type"))
	var raw *bytes.Buffer
	ce := resp.Header.Get("Content-Encoding")
	if wholeReply && isGzip(ce) {
		raw = new(bytes.Buffer)
		resp.Body = teeBody{io.TeeReader(resp.Body, raw), resp.Body}
	}
	if !readable(resp) {
		// A coding celflow does not read (the client's Accept-Encoding
		// allowed it): relayed as it came, without failover.
		r := leg.Relay(x, resp, leg.StreamIdle(x, n.idle), n.writeTimeout)
		for k, v := range r.Attrs {
			res.Attrs[k] = v
		}
		res.Responded, res.Err = r.Responded, r.Err
		return res
	}
	// The truth check of a predicted route reads the first leg's reply: the
	// prediction was for its endpoint and prompt (leg.TapUsage).
	whole := leg.TapUsage(x, resp)
	r := &replayer{n: n, x: x, in: in, p: p, res: &res, tried: endpoints(nil, t), idle: leg.StreamIdle(x, n.idle)}
	if wholeReply {
		// A JSON reply (to a streaming request too, as the plain relay
		// passes it) is read whole.
		r.raw, r.rawCE = raw, ce
		r.whole(ctx, resp)
		return res
	}
	w, ok := x.Run.Answer()
	if !ok {
		resp.Body.Close()
		res.Err = engine.Errorf(engine.KindInternal, "the client was already answered by another node")
		return res
	}
	res.Responded = true
	r.stream(ctx, w, resp, whole)
	return res
}

// replayer is one request's failover state.
type replayer struct {
	n     *Decode
	x     *engine.Exec
	in    *bodyIn
	p     foPlan
	res   *engine.Result
	idle  time.Duration // each leg's stream_idle_timeout: the target rule's, else the node's
	tried []string      // decode endpoints whose legs broke
	spent time.Duration
	over  atomic.Bool // a continuation used up max_added_time before its first event
	open  trace.Span  // a continuation's span until its first event, nil when none
	used  int         // replays made
	// raw is the first leg's gzip reply as it came (rawCE its coding),
	// for a JSON reply read whole; nil otherwise.
	raw   *bytes.Buffer
	rawCE string
}

func endpoints(urls []string, t *upstream.Target) []string {
	if t != nil && t.Endpoint != nil {
		urls = append(urls, t.Endpoint.URL)
	}
	return urls
}

// stream relays a streamed reply across legs (replay.Stream). whole is
// called when the first leg reached its [DONE] (the truth check's count).
func (r *replayer) stream(ctx context.Context, w http.ResponseWriter, resp *http.Response, whole func()) {
	x, in := r.x, r.in
	st := replay.NewStream(w, in.Route, in.Obj != nil && replay.ClientAsked(in.Obj), in.Obj != nil && replay.IncludeUsage(in.Obj))
	if in.Tokens.Known {
		st.SetPrompt(in.Tokens.IDs)
	}
	st.Start(resp, x.Run.Req.ID)
	body := resp.Body
	for first := true; ; first = false {
		err := st.Pump(body)
		if err == nil && first {
			whole()
		}
		body.Close()
		if err == nil {
			r.done(st)
			return
		}
		var brk *replay.Break
		if !errors.As(err, &brk) || x.Run.Ctx.Err() != nil {
			r.abort(st, err)
			return
		}
		leg.Log(x).WithError(err).WithField("tokens", len(st.Gen)).Info("decode failover: the decode reply broke")
		if st.Finished {
			// Only the usage chunk and [DONE] were missing: they are ours to write.
			f := engine.Failover{Reason: brk.Reason, Outcome: replay.OutcomeContinued}
			r.res.Failovers = append(r.res.Failovers, f)
			if ferr := st.Finish(); ferr != nil {
				r.abort(st, ferr)
				return
			}
			r.done(st)
			return
		}
		next, ferr := r.next(ctx, st, brk.Reason)
		if ferr != nil {
			r.abort(st, ferr)
			return
		}
		if next == nil { // the budget ended exactly at the break
			if ferr := st.FinishLength(); ferr != nil {
				r.abort(st, ferr)
				return
			}
			r.done(st)
			return
		}
		body = next.Body
	}
}

// next opens the leg that goes on after a break of the given reason: the
// continuation (or, when the client has seen no event, the request again),
// through a fresh prefill in P/D. nil without error: the token budget is
// spent. It records the failover.
func (r *replayer) next(ctx context.Context, st *replay.Stream, reason string) (*http.Response, error) {
	at := time.Now()
	r.endOpen()
	f := engine.Failover{Reason: reason}
	defer func() {
		if f.Outcome != "" { // "": the client left meanwhile, nothing to count
			r.res.Failovers = append(r.res.Failovers, f)
		}
	}()
	x, in, n := r.x, r.in, r.n
	refuse := func(outcome string) error {
		f.Outcome = outcome
		return errors.New("decode failover refused: " + outcome)
	}
	switch {
	case !n.fo.On[reason]:
		return nil, refuse(replay.OutcomeOff)
	case st.Events > 0 && r.p.refused != "":
		return nil, refuse(r.p.refused)
	case st.Events > 0 && st.Tool:
		return nil, refuse(replay.RefusedTools)
	case st.Events > 0 && st.Reasoning:
		return nil, refuse(replay.RefusedReasoning)
	case st.Events > 0 && (st.MissingIDs || !st.HavePrompt()):
		return nil, refuse(replay.RefusedTokenIDs)
	}
	ctx, span := r.span(ctx, reason, st)
	spanOpen := true
	defer func() {
		if spanOpen { // not continued: the span ends here (else at the first byte)
			span.End()
		}
	}()
	var cin *bodyIn
	var child *engine.Run
	if st.Events == 0 {
		// Nothing but the status went out: the same request again.
		c := *in
		cin, child = &c, x.Run
	} else {
		ids := append(append(make([]int64, 0, len(st.Prompt)+len(st.Gen)), st.Prompt...), st.Gen...)
		b, left := replay.Continuation(in.Route, in.Body, in.Obj, ids, len(st.Gen), in.Model)
		if !left {
			f.Outcome = replay.OutcomeContinued
			return nil, nil
		}
		obj, err := jsonb.Parse(b)
		if err != nil {
			f.Outcome = replay.OutcomeFailed
			return nil, err
		}
		tok := engine.Tokens{Known: true, FromRender: true, IDs: ids}
		route := engine.RouteCompletions // chat and completions continue as completions
		if in.Route == engine.RouteGenerate {
			route = engine.RouteGenerate
		}
		cin = &bodyIn{Route: route, Body: b, Obj: obj, Tokens: tok}
		child = engine.NewRun(x.Run.Ctx, &engine.Request{ID: x.Run.Req.ID, Route: route,
			Header: x.Run.Req.Header, Body: b, Model: x.Run.Req.Model, Stream: true}, nil)
		child.State.Tokens = tok
		child.Deadline = x.Run.Deadline
		if h := leg.OwnedHeaders.Value(x.Run); h != nil { // the async broker's objective and fairness id
			leg.OwnedHeaders.Set(child, h)
		}
	}
	cin.TokenIDs = r.p.ids
	pd := !n.aggregated && handoff.KV.Value(x.Run).PrefillRan
	var lastErr error = errors.New("no attempt left")
	for r.used < n.fo.Attempts {
		if err := x.Run.Ctx.Err(); err != nil { // the client left: nobody to continue for
			f.Outcome = ""
			return nil, err
		}
		if n.fo.Budget > 0 && (r.over.Load() || r.spent+time.Since(at) >= n.fo.Budget) {
			f.Outcome = replay.OutcomeBudget
			return nil, errors.New("decode failover: max_added_time spent")
		}
		r.used++
		if pd {
			pres, _, ok := x.Rerun(ctx, handoff.KV, child)
			if !ok || pres.Err != nil {
				if pres.Err != nil {
					lastErr = pres.Err
				} else {
					lastErr = errors.New("no prefill node ran in this request")
				}
				leg.Log(x).WithError(lastErr).Warn("decode failover: the continuation's prefill failed")
				continue
			}
			cin.KV = handoff.KV.Value(child).Params
		}
		resp, e := r.send(ctx, cin, at)
		if e != nil {
			lastErr = e
			leg.Log(x).WithError(e).Warn("decode failover: the continuation's decode leg failed")
			continue
		}
		if st.Events > 0 {
			st.Continue()
		}
		// max_added_time holds until the continuation's first event reaches
		// the client: a worker that answers its headers and then nothing is
		// cut off when the budget runs out (the next break finds it spent).
		var timer *time.Timer
		if n.fo.Budget > 0 {
			left := max(n.fo.Budget-r.spent-time.Since(at), time.Millisecond)
			body := resp.Body
			timer = time.AfterFunc(left, func() {
				r.over.Store(true)
				body.Close()
			})
		}
		idx := len(r.res.Failovers) // where the deferred record lands
		r.open = span
		st.FirstByte = func() {
			r.open = nil
			if timer != nil {
				timer.Stop()
			}
			stall := time.Since(at)
			r.spent += stall
			r.res.Failovers[idx].Stall = stall
			span.SetAttributes(attribute.Float64("celflow.failover.stall_ms", float64(stall.Microseconds())/1000))
			span.End()
		}
		spanOpen = false
		f.Outcome = replay.OutcomeContinued
		return resp, nil
	}
	f.Outcome = replay.OutcomeFailed
	return nil, lastErr
}

// send picks a decode worker other than the ones that broke and sends the
// leg; the time it may take to answer is bounded by what is left of
// max_added_time.
func (r *replayer) send(ctx context.Context, in *bodyIn, at time.Time) (*http.Response, error) {
	n, x := r.n, r.x
	body, e := build(in)
	if e != nil {
		return nil, e
	}
	t, e := leg.PickAvoiding(x, n.client, upstream.RoleDecode, r.tried)
	if e != nil {
		return nil, e
	}
	ttfb := n.ttfb
	if n.fo.Budget > 0 {
		left := n.fo.Budget - r.spent - time.Since(at)
		if left <= 0 {
			left = time.Millisecond
		}
		if ttfb == 0 || left < ttfb {
			ttfb = left
		}
	}
	var lres engine.Result
	resp, _, e := leg.Call{Role: upstream.RoleDecode, Path: in.Route.Path(), Body: body, TTFB: ttfb, Target: t,
		Prepare: func(l *upstream.Leg) { l.Idle, l.TargetHeader = r.idle, acceptEncoding(l.TargetHeader, l.Header) }}.Send(ctx, x, n.client, &lres)
	r.tried = endpoints(r.tried, t)
	if e != nil {
		if isKVPull(e) {
			return nil, handoffFailure(e)
		}
		return nil, e
	}
	if !readable(resp) { // a continuation must be read: another coding is a failed leg
		resp.Body.Close()
		return nil, errors.New("the continuation's reply has a Content-Encoding celflow does not read")
	}
	return resp, nil
}

// span is the failover's span: a child of decode's, linked to it (the
// original decode span), with what broke and where the reply stood.
func (r *replayer) span(ctx context.Context, reason string, st *replay.Stream) (context.Context, trace.Span) {
	parent := r.x.Span
	if parent == nil || !parent.IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return parent.TracerProvider().Tracer(engine.TracerName).Start(trace.ContextWithSpan(ctx, parent), r.x.NodeID+" failover",
		trace.WithLinks(trace.Link{SpanContext: parent.SpanContext()}),
		trace.WithAttributes(attribute.String("celflow.failover.reason", reason),
			attribute.Int("celflow.failover.tokens_before", len(st.Gen)),
			attribute.Int("celflow.failover.attempt", r.used+1)))
}

// endOpen ends the span of a continuation that broke before its first
// event.
func (r *replayer) endOpen() {
	if r.open != nil {
		r.open.End()
		r.open = nil
	}
}

// done records a reply that completed (or, from abort, ended).
func (r *replayer) done(st *replay.Stream) {
	r.endOpen()
	r.res.Attrs["celflow.bytes_relayed"] = st.Bytes
	if len(r.res.Failovers) > 0 {
		r.res.Attrs["celflow.failovers"] = len(r.res.Failovers)
	}
}

// abort ends the reply abnormally, as the plain relay does: the front
// aborts it (panic(http.ErrAbortHandler)).
func (r *replayer) abort(st *replay.Stream, err error) {
	r.done(st)
	x := r.x
	var e *engine.Error
	var ce *replay.ClientError
	switch {
	case x.Run.Ctx.Err() != nil:
		e = engine.AsError(x.Run.Ctx.Err())
	case errors.As(err, &ce):
		e = engine.Errorf(engine.KindBadGateway, "writing the reply failed after %d bytes", st.Bytes)
	default:
		var brk *replay.Break
		if errors.As(err, &brk) && brk.Reason == replay.ReasonIdle {
			e = engine.Errorf(engine.KindUpstreamTimeout, "reply stalled for %s after %d bytes", r.idle, st.Bytes)
		} else {
			e = engine.Errorf(engine.KindBadGateway, "reply broke off after %d bytes", st.Bytes)
		}
	}
	e.Cause = err
	r.res.Err = e
	leg.Log(x).WithError(err).WithField("bytes", st.Bytes).Info("partial response: relayed reply ended abnormally")
}

// wholeLimit bounds a buffered non-streamed reply.
const wholeLimit = 64 << 20

// whole relays a non-streamed reply: it is read whole before the client
// gets a byte, so a leg that breaks (or an unparseable body) is made again
// on another worker, and the client sees one answer.
func (r *replayer) whole(ctx context.Context, resp *http.Response) {
	x, n := r.x, r.n
	var st *replay.Stream // the replay's bookkeeping (nothing is streamed)
	defer r.endOpen()
	for {
		b, err := upstream.ReadBody(resp, wholeLimit)
		if err == nil && !jsonb.Valid(b) {
			err = errors.New("the reply is not JSON")
		}
		if err == nil && st != nil && st.FirstByte != nil {
			// The made-again reply is whole: its stall ends here.
			f := st.FirstByte
			st.FirstByte = nil
			f()
		}
		if err == nil {
			w, ok := x.Run.Answer()
			if !ok {
				r.res.Err = engine.Errorf(engine.KindInternal, "the client was already answered by another node")
				return
			}
			r.res.Responded = true
			h := w.Header()
			upstream.CopyReplyHeaders(h, resp.Header)
			delete(h, "Content-Encoding")
			if st == nil && r.raw != nil {
				// The first leg's gzip reply decoded whole (its checksum
				// held): the client gets the worker's bytes as they came.
				b = r.raw.Bytes()
				h["Content-Encoding"] = []string{r.rawCE}
			}
			h["Content-Length"] = []string{strconv.Itoa(len(b))}
			h["X-Request-Id"] = []string{x.Run.Req.ID}
			rc := http.NewResponseController(w)
			var dl time.Time
			if n.writeTimeout > 0 {
				dl = time.Now().Add(n.writeTimeout)
			}
			_ = rc.SetWriteDeadline(dl)
			w.WriteHeader(resp.StatusCode)
			m, werr := w.Write(b)
			r.res.Attrs["celflow.bytes_relayed"] = int64(m)
			if werr != nil {
				r.res.Err = engine.Errorf(engine.KindBadGateway, "writing the reply failed after %d bytes", m)
				if x.Run.Ctx.Err() != nil {
					r.res.Err = engine.AsError(x.Run.Ctx.Err())
				}
			}
			if len(r.res.Failovers) > 0 {
				r.res.Attrs["celflow.failovers"] = len(r.res.Failovers)
			}
			return
		}
		if x.Run.Ctx.Err() != nil {
			r.res.Err = engine.AsError(x.Run.Ctx.Err())
			return
		}
		reason := replay.ReasonTruncated
		var te *upstream.TimeoutError
		if errors.As(err, &te) {
			reason = replay.ReasonIdle
		}
		leg.Log(x).WithError(err).Info("decode failover: the decode reply broke before it was whole")
		st = replay.NewStream(nil, x.Run.Req.Route, false, false) // nothing went out
		next, ferr := r.next(ctx, st, reason)
		if ferr != nil {
			e := engine.Errorf(engine.KindBadGateway, "the decode reply broke off and failover could not complete it")
			if reason == replay.ReasonIdle {
				e = engine.Errorf(engine.KindUpstreamTimeout, "the decode reply stalled and failover could not complete it")
			}
			e.Cause = ferr
			// Nothing was written: the front answers with the error.
			r.res.Err = e
			return
		}
		resp = next
	}
}
