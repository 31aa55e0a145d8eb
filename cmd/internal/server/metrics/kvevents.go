package metrics

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/celflow/celflow/connectors/kvevents"
)

// KV events (issue 20): per worker, read from the serving generation's hub
// at scrape time. The worker label is pool[index] as configured
// (config.KVEvents.Workers), never an address; pool joins the pools a
// worker serves in. Both are bounded by the config.
type kvMetrics struct {
	hub atomic.Pointer[kvevents.Hub]
}

func kvDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(Namespace+"_"+name, help, append([]string{"pool", "worker"}, labels...), nil)
}

var (
	descKVState = kvDesc("kv_events_worker_state",
		"KV event subscription state per worker: 1 for its current state (connecting, down, waiting, live, stale, gapped), 0 for the others.", "state")
	descKVBatches = kvDesc("kv_events_batches_total",
		"KV event batches applied to the index (live and replayed), per worker.")
	descKVEvents = kvDesc("kv_events_events_total",
		"KV events (BlockStored, BlockRemoved, AllBlocksCleared) applied, per worker.")
	descKVGaps = kvDesc("kv_events_gaps_total",
		"Holes in a worker's event sequence (batches the subscriber missed).")
	descKVReplayed = kvDesc("kv_events_replayed_batches_total",
		"Batches recovered from a worker's replay endpoint.")
	descKVReplayFail = kvDesc("kv_events_replay_failures_total",
		"Replay requests that failed or could not cover a gap.")
	descKVDecode = kvDesc("kv_events_decode_errors_total",
		"Event messages that could not be read (bad framing or payload).")
	descKVConnect = kvDesc("kv_events_connect_failures_total",
		"Failed attempts to connect to a worker's publisher (connect topology).")
	descKVRestarts = kvDesc("kv_events_restarts_total",
		"Publisher restarts and lost connections seen; each starts the worker's view over.")
	descKVLag = kvDesc("kv_events_lag_seconds",
		"Event-to-index lag of the worker's last batch: its timestamp to the time it was applied.")
	descKVAge = kvDesc("kv_events_last_batch_age_seconds",
		"Time since the worker's last batch was applied (absent before the first).")
	descKVBlocks = kvDesc("kv_index_blocks",
		"Blocks the event index holds for the worker.")
)

type kvCollector struct{ m *kvMetrics }

func (c kvCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKVState, descKVBatches, descKVEvents, descKVGaps, descKVReplayed,
		descKVReplayFail, descKVDecode, descKVConnect, descKVRestarts, descKVLag, descKVAge, descKVBlocks} {
		ch <- d
	}
}

func (c kvCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.m.hub.Load()
	if h == nil {
		return
	}
	now := time.Now()
	for _, s := range h.Stats() {
		l := []string{strings.Join(s.Pools, ","), s.ID}
		for _, st := range kvevents.States {
			v := 0.0
			if st == s.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descKVState, prometheus.GaugeValue, v, append(l, st)...)
		}
		counter := func(d *prometheus.Desc, n int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n), l...)
		}
		counter(descKVBatches, s.Batches)
		counter(descKVEvents, s.Events)
		counter(descKVGaps, s.Gaps)
		counter(descKVReplayed, s.Replayed)
		counter(descKVReplayFail, s.ReplayFailures)
		counter(descKVDecode, s.DecodeErrors)
		counter(descKVConnect, s.ConnectFailures)
		counter(descKVRestarts, s.Restarts)
		ch <- prometheus.MustNewConstMetric(descKVBlocks, prometheus.GaugeValue, float64(s.Blocks), l...)
		if !s.LastBatch.IsZero() {
			ch <- prometheus.MustNewConstMetric(descKVLag, prometheus.GaugeValue, s.Lag.Seconds(), l...)
			ch <- prometheus.MustNewConstMetric(descKVAge, prometheus.GaugeValue, now.Sub(s.LastBatch).Seconds(), l...)
		}
	}
}

// WatchKVEvents makes h the hub whose workers the kv_events series report
// (nil: events are off, no series). Call it when h's generation starts
// serving, as WatchUpstream.
func (m *Metrics) WatchKVEvents(h *kvevents.Hub) { m.kv.hub.Store(h) }
