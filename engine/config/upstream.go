package config

import (
	"strings"

	"github.com/celflow/celflow/engine/upstream"
	"github.com/celflow/celflow/schema"
)

// NewUpstream builds the upstream client. The upstream package's own checks
// (mode, URLs, duplicate endpoints) come back as diagnostics at the key's
// position in the config file, or naming the variable that set it.
func (c *Config) NewUpstream() (*upstream.Client, schema.Diagnostics) {
	cl, err := upstream.New(c.Upstream)
	if err == nil {
		return cl, nil
	}
	var ds schema.Diagnostics
	for _, line := range strings.Split(err.Error(), "\n") {
		key, msg, ok := strings.Cut(line, ": ")
		if !ok {
			key, msg = "upstream", line
		}
		ptr := pointerOf(key)
		d := c.doc.Diag(ptr, schema.Error, msg).R(schema.RuleUpstream)
		if env := c.envFor(d.Path); env != "" {
			d.File, d.Line, d.Col = env, 0, 0
		}
		ds = append(ds, d)
	}
	return nil, ds.Sort()
}

// upstreamNames maps the upstream package's field names to the YAML keys.
var upstreamNames = map[string]string{
	"failure_threshold":       "health.failure_threshold",
	"eject_for":               "health.eject_for",
	"idle_conn_timeout":       "connections.idle_timeout",
	"max_idle_conns_per_host": "connections.max_idle_per_host",
	"max_conns_per_host":      "connections.max_per_host",
	"short_prompt_tokens":     "conditional_decode.short_prompt_tokens",
	"prefix_block_tokens":     "conditional_decode.prefix_block_tokens",
	"prefix_index_size":       "conditional_decode.prefix_index_size",
}

// pointerOf turns "upstream.pools.prefill[0].url" into
// /upstream/pools/prefill/0/url.
func pointerOf(dotted string) string {
	rest := strings.TrimPrefix(dotted, "upstream.")
	if n, ok := upstreamNames[rest]; ok {
		rest = n
	}
	if rest == "upstream" {
		return "/upstream"
	}
	rest = strings.NewReplacer("[", ".", "]", "").Replace(rest)
	return "/upstream/" + strings.ReplaceAll(rest, ".", "/")
}
