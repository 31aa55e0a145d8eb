package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/config"
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/connectors/async"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/asyncbroker"
)

// asyncSetup is the process's async machinery built from the serve
// config's `async` object (restart-only): the runtime every generation's
// build gets as the service asyncbroker.ServiceName, routes for the front
// (which read the live generation's binding), and the dispatcher started
// once the front exists.
type asyncSetup struct {
	rt      *asyncbroker.Runtime
	builtin *async.Builtin
	rdb     *redis.Client
	cfg     config.Async
	up      atomic.Pointer[upstream.Client] // what the gate reads; swapped on reload
}

// newAsync builds the runtime; nil when async is off.
func newAsync(a config.Async, reg prometheus.Registerer, log *logrus.Logger) (*asyncSetup, error) {
	if !a.Enabled() {
		return nil, nil
	}
	opt, err := redis.ParseURL(a.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("async.redis_url: %v", err)
	}
	rdb := redis.NewClient(opt)
	var backend async.Backend
	var b *async.Builtin
	switch a.Backend {
	case "llm-d-async":
		// An llm-d-async processor drains the queues; no dispatcher here.
		backend = async.NewLLMD(rdb, async.LLMDConfig{Grace: a.FetchGrace, ResultTTL: a.ResultTTL, DB: opt.DB,
			Scrubbed: func(member, original string) {
				// The client got the text without URLs and addresses.
				log.WithField("request", member).WithField("error_message", original).Warn("async: the processor's error message was relayed scrubbed")
			}})
	default:
		b = async.NewBuiltin(rdb, async.BuiltinConfig{Prefix: a.KeyPrefix, Queues: a.Queues, Lanes: a.Tiers,
			ResultTTL: a.ResultTTL, Grace: a.FetchGrace, MaxDeliveries: a.MaxDeliveries, Lease: a.Lease,
			TenantBacklog: a.TenantBacklog, QueueBacklog: a.QueueBacklog})
		backend = b
	}
	rt := asyncbroker.NewRuntime(backend, asyncSettings(a), asyncbroker.NewMetrics(reg), log)
	return &asyncSetup{rt: rt, builtin: b, rdb: rdb, cfg: a}, nil
}

// asyncSettings are the async section's keys the HTTP side and the
// async-broker node read (serve and the checks build the node alike).
func asyncSettings(a config.Async) asyncbroker.Settings {
	return asyncbroker.Settings{Queues: a.Queues, Tiers: a.Tiers,
		WaitDefault: a.WaitTimeout, WaitMax: a.WaitMax, EnqueueDefault: a.EnqueueTimeout, WaitCap: a.WaitCap,
		MaxWaiters: a.MaxWaiters, PollInterval: a.PollInterval, MaxInlineBytes: a.MaxInlineBytes}
}

// services are what the async machinery lends every generation's nodes
// (nil when async is off: the async-broker node then answers queued modes
// 503).
func (s *asyncSetup) services() engine.Services {
	if s == nil {
		return nil
	}
	return engine.Services{asyncbroker.ServiceName: s.rt}
}

// routes are GET and DELETE /v1/requests/{id}, scoped by the header names
// of the live generation's async-broker node.
func (s *asyncSetup) routes() []front.Route {
	if s == nil {
		return nil
	}
	return []front.Route{
		{Path: asyncbroker.PathRequests, Methods: []string{"GET"}, Handler: s.rt.GetHandler(front.PathVar, asyncBinding)},
		{Path: asyncbroker.PathRequests, Methods: []string{"DELETE"}, Handler: s.rt.DeleteHandler(front.PathVar, asyncBinding)},
	}
}

// InFlight implements asyncbroker.InFlightView over the live upstream client.
func (s *asyncSetup) InFlight(role string) int64 {
	if up := s.up.Load(); up != nil {
		return up.InFlight(upstream.Role(role))
	}
	return 0
}

// dispatch runs the dispatcher until ctx ends (builtin, when enabled),
// creating the consumer groups first (retried while Redis is away).
func (s *asyncSetup) dispatch(ctx context.Context, srv *front.Server, drain time.Duration, log *logrus.Logger) {
	if s == nil || s.builtin == nil || !s.cfg.Dispatcher {
		return
	}
	for {
		err := s.builtin.Ensure(ctx)
		if err == nil {
			break
		}
		log.WithError(err).Warn("async: cannot create the consumer groups; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
	d := asyncbroker.NewDispatcher(s.rt, s.builtin, asyncbroker.DispatcherOptions{
		Handler: srv.Handler(), View: s, Budget: s.cfg.Budget, Concurrency: s.cfg.Concurrency})
	d.Run(ctx, drain)
}

func (s *asyncSetup) close() {
	if s == nil {
		return
	}
	_ = s.rt.Backend.Close()
	_ = s.rdb.Close()
}
