package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// The async object: defaults, file values, CELFLOW_ASYNC_* overrides (a
// list from comma-separated text), and strict errors at their position.
func TestAsyncConfig(t *testing.T) {
	const wf = "workflow: ./w.yaml\n"
	cases := []struct {
		name, yaml string
		env        map[string]string
		check      func(a Async) bool
		err        string
	}{
		{"off by default", wf, nil, func(a Async) bool {
			return !a.Enabled() && a.Backend == "builtin" && a.MaxDeliveries == 3 && a.FetchGrace == time.Minute &&
				a.WaitCap == time.Minute && a.MaxWaiters == 1000 &&
				reflect.DeepEqual(a.Tiers, []string{"interactive", "async", "batch"}) && a.Dispatcher
		}, ""},
		{"file values", "async:\n  redis_url: redis://r:6379/0\n  backend: llm-d-async\n  queues: [request-sortedset]\n  wait_cap: 5s\n  max_waiters: 0\n  dispatcher: {enabled: false, budget: 3}\n" + wf, nil,
			func(a Async) bool {
				return a.Enabled() && a.Backend == "llm-d-async" && a.Queues[0] == "request-sortedset" && a.WaitCap == 5*time.Second && a.MaxWaiters == 0 &&
					!a.Dispatcher && a.Budget == 3
			}, ""},
		{"environment", wf, map[string]string{"CELFLOW_ASYNC_REDIS_URL": "redis://e:1/2", "CELFLOW_ASYNC_QUEUES": "a, b",
			"CELFLOW_ASYNC_BACKLOG_PER_TENANT": "7", "CELFLOW_ASYNC_DISPATCHER_ENABLED": "false"}, func(a Async) bool {
			return a.RedisURL == "redis://e:1/2" && reflect.DeepEqual(a.Queues, []string{"a", "b"}) && a.TenantBacklog == 7 && !a.Dispatcher
		}, ""},
		{"unknown key", "async:\n  redis: x\n" + wf, nil, nil, "config.yaml:2:3"},
		{"bad backend", "async:\n  backend: kafka\n" + wf, nil, nil, "async.backend"},
		{"queue name with a colon", "async:\n  queues: [\"a:b\"]\n" + wf, nil, nil, "async.queues[0]"},
		{"negative waiter bound", "async:\n  max_waiters: -1\n" + wf, nil, nil, "config.yaml:2:16"},
		{"bad env duration", wf, map[string]string{"CELFLOW_ASYNC_LEASE": "soon"}, nil, "CELFLOW_ASYNC_LEASE"},
	}
	for _, c := range cases {
		cfg, ds := Load("config.yaml", []byte(c.yaml), func(k string) string { return c.env[k] })
		if c.err != "" {
			if cfg != nil || !strings.Contains(ds.String(), c.err) {
				t.Errorf("%s: want an error naming %q, got %v", c.name, c.err, ds.String())
			}
			continue
		}
		if cfg == nil {
			t.Errorf("%s: %s", c.name, ds.String())
			continue
		}
		if !c.check(cfg.Async) {
			t.Errorf("%s: %+v", c.name, cfg.Async)
		}
	}
}
