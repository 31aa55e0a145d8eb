package sim

import (
	"errors"
	"net/http"
	"strings"
)

// infer serves the three inference paths for the encode, prefill and decode
// roles (docs/protocol.md, Conditional decode to KV connectors, seen from the
// worker).
func (w *Worker) infer(f format) func(*call) {
	return func(c *call) {
		req, perr := parseRequest(f, c.body)
		c.req = req
		role, rerr := w.workerRole(c.r.Header.Get("EPP-Profile"), req)
		c.role = role
		w.rec.update(c.rec, func(x *Record) { x.Role = role })
		if rerr != nil {
			c.fail(http.StatusBadRequest, rerr.Error())
			return
		}
		if !w.applyFaults(c) {
			return
		}
		if perr != nil {
			c.fail(http.StatusBadRequest, perr.Error())
			return
		}
		req.Prompt.LoRA, req.Prompt.LoRAID = w.adapterOf(req.Model)
		p := req.Prompt
		c.cached = w.cache.Cached(p)
		w.met.lookup(len(p.Tokens), c.cached)
		if role == RoleDecode && req.CacheHitThreshold != nil && req.KV == nil {
			// Worker-decided conditional decode (vLLM RFC #24256): the
			// threshold rules, Prefer is ignored as vLLM ignores it. A
			// disaggregated leg (kv_transfer_params) is never judged.
			if !w.thresholdMet(c, p) {
				return
			}
		} else if role == RoleDecode && preferIfAvailable(c.r.Header) {
			// Conditional decode: only serve what the prefix cache holds.
			if !w.prefix.Hit(p) {
				c.cache = "miss"
				c.rw.Header().Set("X-Sim-Cache", "miss")
				c.fail(http.StatusPreconditionFailed, "prompt prefix is not cached on "+w.cfg.Name+" (Prefer: if-available)")
				return
			}
			c.cache = "hit"
			c.rw.Header().Set("X-Sim-Cache", "hit")
		}
		end := w.met.start(w.kvBlocks(req))
		defer end()
		out, err := w.handoff(c, p)
		if err != nil {
			if c.r.Context().Err() != nil {
				return
			}
			status := http.StatusBadRequest
			var he *handoffError
			if errors.As(err, &he) {
				status = he.Status
			}
			c.fail(status, err.Error())
			return
		}
		if role == RoleDecode {
			w.prefix.Insert(p)
		}
		w.met.prompt.Add(float64(len(p.Tokens)))
		w.generate(c, out)
		if c.complete {
			w.met.generation.Add(float64(req.N * w.answerLen(req)))
		}
	}
}

// handoff plays the disaggregation part of a request: produce or pull KV,
// meet in an SGLang room, check encoder outputs, or encode items.
func (w *Worker) handoff(c *call, p promptInfo) (transferOut, error) {
	var out transferOut
	req := c.req
	ctx := c.r.Context()
	switch {
	case req.Bootstrap != nil && c.role == RolePrefill:
		if err := w.prefillRoom(ctx, req.Bootstrap, p); err != nil {
			return out, err
		}
		host, port := w.self(c.r)
		out.BootstrapHost, out.BootstrapPort, out.BootstrapRoom = &host, ptr(int64(port)), &req.Bootstrap.Room
	case req.Bootstrap != nil && c.role == RoleDecode:
		if err := w.joinRoom(ctx, req.Bootstrap, p); err != nil {
			return out, err
		}
	case kvFlag(req.KV, "do_remote_decode"):
		kv, err := w.produceKV(c, p)
		if err != nil {
			return out, err
		}
		out.KV = kv
	case kvFlag(req.KV, "do_remote_prefill"):
		if err := w.pullKV(c, p); err != nil {
			return out, err
		}
	}
	if len(req.EC) > 0 {
		if err := w.checkEC(c, p); err != nil {
			return out, err
		}
	}
	if c.role == RoleEncode {
		out.EC = w.encodeItems(c, p)
	}
	return out, nil
}

// preferIfAvailable reports whether the request carries Prefer: if-available
// (RFC 7240 preferences are comma-separated, case-insensitive tokens).
func preferIfAvailable(h http.Header) bool {
	for _, v := range h.Values("Prefer") {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), "if-available") {
				return true
			}
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }
