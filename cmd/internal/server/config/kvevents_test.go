package config

import (
	"strings"
	"testing"
	"time"
)

// upstream.kv_events and the endpoints' kv_events/kv_replay: off by
// default, both topologies, and every misuse at its position.
func TestKVEventsConfig(t *testing.T) {
	const wf = "workflow: ./w.yaml\n"
	const direct = "upstream:\n  pools:\n"
	cases := []struct {
		name, yaml string
		env        map[string]string
		check      func(k KVEvents) bool
		err        string
	}{
		{"off by default", direct + "    decode: [http://d1:8000]\n" + wf, nil, func(k KVEvents) bool {
			return !k.Enabled() && k.StaleAfter == 30*time.Second && k.MaxBlocksPerWorker == 65536 && len(k.Workers()) == 0
		}, ""},
		{"connect topology", direct + "    decode:\n      - {url: http://d1:8000, kv_events: tcp://d1:5557, kv_replay: tcp://d1:5558}\n      - http://d2:8000\n" +
			"    chat:\n      - {url: http://c1:8000, kv_events: tcp://c1:5557}\n  kv_events: {stale_after: 5s, max_blocks_per_worker: 10}\n" + wf, nil,
			func(k KVEvents) bool {
				ws := k.Workers()
				return k.Enabled() && k.StaleAfter == 5*time.Second && k.MaxBlocksPerWorker == 10 && len(ws) == 2 &&
					ws[0].ID == "decode[0]" && ws[0].Events == "tcp://d1:5557" && ws[0].Replay == "tcp://d1:5558" &&
					ws[1].ID == "chat[0]" && ws[1].Base == "http://c1:8000"
			}, ""},
		{"bind topology", direct + "    decode: [http://d1:8000, http://d2:8000]\n  kv_events: {bind: \"tcp://*:5557\", topic: kv@}\n" + wf, nil,
			func(k KVEvents) bool {
				return k.Enabled() && k.Bind == "tcp://*:5557" && k.Topic == "kv@" && len(k.Workers()) == 2
			}, ""},
		{"environment", direct + "    decode: [http://d1:8000]\n" + wf, map[string]string{"CELFLOW_UPSTREAM_KV_EVENTS_BIND": "tcp://0.0.0.0:5557"},
			func(k KVEvents) bool { return k.Enabled() && len(k.Workers()) == 1 }, ""},
		{"not tcp", direct + "    decode:\n      - {url: http://d1:8000, kv_events: \"ipc:///x\"}\n" + wf, nil, nil, "config.yaml:4:42: upstream.pools.decode[0].kv_events: does not match pattern"},
		{"bad port", direct + "    decode:\n      - {url: http://d1:8000, kv_events: \"tcp://d1:x\"}\n" + wf, nil, nil, "upstream.pools.decode[0].kv_events"},
		{"prefill publishes", direct + "    prefill:\n      - {url: http://p1:8000, kv_events: \"tcp://p1:5557\"}\n" + wf, nil, nil, "decode pool and named pools only"},
		{"both topologies", direct + "    decode:\n      - {url: http://d1:8000, kv_events: \"tcp://d1:5557\"}\n  kv_events: {bind: \"tcp://*:5557\"}\n" + wf, nil, nil, "exclusive"},
		{"replay alone", direct + "    decode:\n      - {url: http://d1:8000, kv_replay: \"tcp://d1:5558\"}\n" + wf, nil, nil, "needs kv_events"},
		{"bad bind", direct + "    decode: [http://d1:8000]\n  kv_events: {bind: \"tcp://nowhere\"}\n" + wf, nil, nil, "upstream.kv_events.bind"},
		{"zero stale_after", direct + "    decode: [http://d1:8000]\n  kv_events: {stale_after: 0s}\n" + wf, nil, nil, "must be above 0s"},
		{"gateway mode", "upstream:\n  gateway: http://gw:80\n  kv_events: {bind: \"tcp://*:5557\"}\n" + wf, nil, nil, "in gateway mode"},
		{"unknown key", direct + "    decode: [http://d1:8000]\n  kv_events: {binds: x}\n" + wf, nil, nil, "config.yaml:4:15"},
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
		if !c.check(cfg.KVEvents) {
			t.Errorf("%s: %+v", c.name, cfg.KVEvents)
		}
	}
}
