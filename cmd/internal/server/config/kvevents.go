package config

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/celflow/celflow/connectors/kvevents"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/schema"
)

// KVEvents is upstream.kv_events with the endpoints' kv_events and
// kv_replay keys: where the workers' KV cache events are read
// (docs/operations.md, KV events). Off (Enabled false) unless bind is set or
// an endpoint names its publisher.
type KVEvents struct {
	Bind               string
	Topic              string
	StaleAfter         time.Duration
	MaxBlocksPerWorker int
	// Endpoints are the decode and named pools' endpoints, in pool order
	// (decode first, then the named pools by name) and config order, with
	// their kv_events and kv_replay ("" when unset).
	Endpoints []KVEndpoint
}

// KVEndpoint is one endpoint that may publish KV events.
type KVEndpoint struct {
	Pool   string
	Index  int // in its pool's list
	URL    string
	Events string
	Replay string
}

// Enabled reports whether any worker's events are read.
func (k KVEvents) Enabled() bool {
	if k.Bind != "" {
		return true
	}
	for _, e := range k.Endpoints {
		if e.Events != "" {
			return true
		}
	}
	return false
}

// Workers are the subscriptions to make: every listed endpoint in the bind
// topology (a worker is matched by its topic), those with kv_events
// otherwise. ID names a worker by pool and position, never by address:
// it is what metrics and /health show.
func (k KVEvents) Workers() []kvevents.Worker {
	var out []kvevents.Worker
	for _, e := range k.Endpoints {
		if k.Bind == "" && e.Events == "" {
			continue
		}
		out = append(out, kvevents.Worker{Pool: e.Pool, ID: fmt.Sprintf("%s[%d]", e.Pool, e.Index), Base: e.URL, Events: e.Events, Replay: e.Replay})
	}
	return out
}

// Options are the hub's shared settings; blockSize is the prefix index's.
func (k KVEvents) Options(blockSize int) kvevents.Options {
	return kvevents.Options{Bind: k.Bind, Topic: k.Topic, StaleAfter: k.StaleAfter, MaxBlocksPerWorker: k.MaxBlocksPerWorker, BlockSize: blockSize}
}

type kvEventsDoc struct {
	Bind               schema.Val[string]        `json:"bind"`
	Topic              schema.Val[string]        `json:"topic"`
	StaleAfter         schema.Val[time.Duration] `json:"stale_after"`
	MaxBlocksPerWorker schema.Val[int]           `json:"max_blocks_per_worker"`
}

func decodeKVEvents(k *KVEvents, u *upstreamDoc) {
	keep(&k.Bind, u.KVEvents.Bind)
	keep(&k.Topic, u.KVEvents.Topic)
	keep(&k.StaleAfter, u.KVEvents.StaleAfter)
	keep(&k.MaxBlocksPerWorker, u.KVEvents.MaxBlocksPerWorker)
	k.Endpoints = nil
	var names []string
	for r := range u.Pools {
		if r != upstream.RoleDecode && r != upstream.RoleEncode && r != upstream.RolePrefill {
			names = append(names, string(r))
		}
	}
	sort.Strings(names)
	for _, name := range append([]string{string(upstream.RoleDecode)}, names...) {
		for i, e := range u.Pools[upstream.Role(name)] {
			k.Endpoints = append(k.Endpoints, KVEndpoint{Pool: name, Index: i, URL: e.URL, Events: e.KVEvents, Replay: e.KVReplay})
		}
	}
}

// checkKVEvents adds what the schema cannot say: endpoint syntax, which
// pools may publish, and that the two topologies are not mixed.
func (c *Config) checkKVEvents(f *fileDoc) schema.Diagnostics {
	var ds schema.Diagnostics
	bad := func(ptr, msg string) {
		ds = append(ds, c.Diag(ptr, schema.RuleUpstream, msg))
	}
	// The schema reports a value without tcp:// itself.
	checkEP := func(ep string) error {
		if !strings.HasPrefix(ep, "tcp://") {
			return nil
		}
		return kvevents.CheckEndpoint(ep)
	}
	u := &f.Upstream
	kd := &u.KVEvents
	if kd.Bind.Set {
		if err := checkEP(kd.Bind.V); err != nil {
			bad(kd.Bind.Ptr, err.Error())
		}
	}
	if kd.StaleAfter.Set && kd.StaleAfter.V <= 0 {
		bad(kd.StaleAfter.Ptr, "must be above 0s (default 30s)")
	}
	var roles []upstream.Role
	for r := range u.Pools {
		roles = append(roles, r)
	}
	sort.Slice(roles, func(i, j int) bool { return roles[i] < roles[j] })
	used := kd.Bind.Set
	for _, r := range roles {
		for i, e := range u.Pools[r] {
			ptr := fmt.Sprintf("%s/%d", schema.Ptr("/upstream/pools", string(r)), i)
			if e.KVEvents == "" && e.KVReplay == "" {
				continue
			}
			used = true
			if r == upstream.RoleEncode || r == upstream.RolePrefill {
				bad(ptr, fmt.Sprintf("kv_events and kv_replay are read for the decode pool and named pools only (routing by cache picks decode workers), not %s", r))
				continue
			}
			if e.KVEvents != "" {
				if err := checkEP(e.KVEvents); err != nil {
					bad(ptr+"/kv_events", err.Error())
				} else if kd.Bind.Set {
					bad(ptr+"/kv_events", "a worker's publisher (connect topology) and upstream.kv_events.bind (bind topology) are exclusive: set one")
				}
			}
			if e.KVReplay != "" {
				if err := checkEP(e.KVReplay); err != nil {
					bad(ptr+"/kv_replay", err.Error())
				} else if e.KVEvents == "" && !kd.Bind.Set {
					bad(ptr+"/kv_replay", "needs kv_events on this endpoint (or upstream.kv_events.bind): replay fills gaps in events that are read")
				}
			}
		}
	}
	gateway := c.Upstream.Mode == "gateway" || c.Upstream.Mode == "" && c.Upstream.Gateway != "" && len(c.Upstream.Pools) == 0
	if used && gateway {
		bad("/upstream/kv_events", "KV events feed direct mode's routing; in gateway mode the endpoint picker reads them")
	}
	return ds
}
