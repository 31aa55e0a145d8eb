package asyncbroker

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/celflow/celflow/connectors/async"
)

// PathRequests is the route template of GET and DELETE (front.Route).
const PathRequests = "/v1/requests/{id}"

// GetHandler serves GET /v1/requests/{id}: scoped by the tenant header,
// never consuming the result; ?wait=N long-polls up to N seconds (bounded
// by async.wait_cap, else by the wait-mode maximum). pathVar reads the {id}
// variable (front.PathVar). bind returns the binding of the generation that
// serves the request (its tenant header names); nil, or a nil result, means
// the defaults.
func (rt *Runtime) GetHandler(pathVar func(*http.Request, string) string, bind func(*http.Request) *Binding) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, tenant, ok := rt.target(w, r, pathVar, bind)
		if !ok {
			return
		}
		wait, asked, ok := rt.waitParam(w, r, id)
		if !ok {
			return
		}
		if asked {
			// A long-poll is bounded twice: its length (wait_cap), and how
			// many this replica holds (max_waiters; above it the current
			// state at once, as a wait that timed out would answer). The
			// header tells the client the wait it got.
			if wait > 0 && !rt.enterWait() {
				wait = 0
			} else if wait > 0 {
				defer rt.leaveWait()
			}
			// Whole seconds, rounded up: 0 only when no wait was held.
			w.Header().Set(HeaderWait, strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		}
		rec, err := rt.fetchWait(r.Context(), tenant, id, wait)
		if err != nil {
			if r.Context().Err() != nil {
				return // the client left
			}
			rt.Log.WithError(err).WithField("request_id", id).Error("async: fetch failed")
			writeStoreError(w, CodeFetchFailed, id)
			return
		}
		switch rec.State {
		case async.StateDone:
			rt.Metrics.servedKind("result")
		case async.StateUnknown:
			rt.Metrics.servedKind("unknown")
		default:
			rt.Metrics.servedKind("pending")
		}
		writeRecord(w, id, rec, rt.Settings.PollInterval)
	})
}

// DeleteHandler serves DELETE /v1/requests/{id}: cancel (best effort),
// delete the result, 204; repeats and unknown ids also 204. pathVar and
// bind are GetHandler's.
func (rt *Runtime) DeleteHandler(pathVar func(*http.Request, string) string, bind func(*http.Request) *Binding) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, tenant, ok := rt.target(w, r, pathVar, bind)
		if !ok {
			return
		}
		if err := rt.Backend.Cancel(r.Context(), tenant, id, false); err != nil {
			rt.Log.WithError(err).WithField("request_id", id).Error("async: cancel failed")
			writeStoreError(w, CodeCancelFailed, id)
			return
		}
		w.Header().Set("X-Request-Id", id)
		w.WriteHeader(http.StatusNoContent)
	})
}

// target reads and checks the id and tenant (400 when invalid).
func (rt *Runtime) target(w http.ResponseWriter, r *http.Request, pathVar func(*http.Request, string) string, bind func(*http.Request) *Binding) (id, tenant string, ok bool) {
	id = pathVar(r, "id")
	reply := w.Header().Get("X-Request-Id")
	if !validID(id) {
		writeError(w, http.StatusBadRequest, "invalid_request", "the request id must match [A-Za-z0-9-]{1,128}", reply)
		return "", "", false
	}
	var b *Binding
	if bind != nil {
		b = bind(r)
	}
	c := b.headers()
	tenant, single := tenantOf(r.Header, c.tenant, c.tenantAlias)
	if !single {
		writeError(w, http.StatusBadRequest, "invalid_request", c.tenant+" was sent more than once (or with its alias "+c.tenantAlias+"): the tenant scopes results, send exactly one", id)
		return "", "", false
	}
	if tenant == "" {
		tenant = "default"
	}
	if !validTenant(tenant) {
		writeError(w, http.StatusBadRequest, "invalid_request", c.tenant+" must match [A-Za-z0-9._-]{1,64}", id)
		return "", "", false
	}
	w.Header().Set("X-Request-Id", id)
	return id, tenant, true
}

// waitParam reads ?wait=N, clamped to wait_cap (else the wait-mode
// maximum); asked reports whether the parameter was sent.
func (rt *Runtime) waitParam(w http.ResponseWriter, r *http.Request, id string) (wait time.Duration, asked, ok bool) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, false, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "wait must be a non-negative integer (seconds)", id)
		return 0, true, false
	}
	limit := rt.Settings.WaitMax
	if rt.Settings.WaitCap > 0 {
		limit = rt.Settings.WaitCap
	}
	// Compare in seconds: a huge N must not overflow a Duration.
	if int64(n) > int64(limit/time.Second) {
		return limit, true, true
	}
	return time.Duration(n) * time.Second, true, true
}

// fetchWait fetches, and while the request is pending waits up to wait
// for its result (pub/sub wake-up, polling fallback).
func (rt *Runtime) fetchWait(ctx context.Context, tenant, id string, wait time.Duration) (async.Record, error) {
	b := rt.Backend
	if wait <= 0 {
		return b.Fetch(ctx, tenant, id)
	}
	end := time.NewTimer(wait)
	defer end.Stop()
	poll := time.NewTicker(rt.Settings.PollInterval)
	defer poll.Stop()
	for {
		woke, stop := b.Watch(tenant, id)
		rec, err := b.Fetch(ctx, tenant, id)
		if err != nil || (rec.State != async.StateQueued && rec.State != async.StateInProgress) {
			stop()
			return rec, err
		}
		select {
		case <-woke:
		case <-poll.C:
		case <-end.C:
			stop()
			return rec, nil
		case <-ctx.Done():
			stop()
			return rec, ctx.Err()
		}
		stop()
	}
}
