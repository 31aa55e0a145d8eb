package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// flow is one celflow workflow under test. The workflows are written here,
// in the shapes of the shipped ones (workflows/decode-only.yaml, pd.yaml,
// epd.yaml), rather than read from workflows/: the benchmark must point the
// render node at its own worker, and a run must not change meaning when a
// shipped file is edited.
type flow struct {
	key   string // short name, used in tables
	title string
	legs  int // worker legs on the path a text request takes (render included)
	yaml  string
}

var flows = []flow{
	{"decode", "celflow decode-only", 1, `
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: bench-decode-only, version: "1"}
  routes: [chat]
  nodes:
    - id: decode
      type: decode
      params: {failover: {attempts: 2}}   # as the shipped workflows
`},
	{"pd", "celflow prefill→decode", 2, `
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: bench-pd, version: "1"}
  routes: [chat]
  defaults: {kv_connector: kv-nixl}
  nodes:
    - id: prefill
      type: prefill
      retry: {attempts: 2, backoff: 100ms}
    - id: decode
      type: decode
      needs: [prefill]
      params: {failover: {attempts: 2}}   # as the shipped workflows
`},
	// The full E/P/D graph on a text request: fetch-media finds no media,
	// render is called, conditional decode is a predicted miss in direct
	// mode (the worker's render gives every request a unique first block,
	// so no call is made), encode has no items, then prefill and decode.
	{"epd", "celflow E/P/D (text, cond-decode miss)", 3, `
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: bench-epd, version: "1"}
  routes: [chat]
  defaults: {kv_connector: kv-nixl, ec_connector: ec-nixl}
  nodes:
    - id: fetch
      type: fetch-media
      when: request.format == "chat"
    - id: render
      type: render
      needs: [fetch]
      params: {address: "WORKER"}
    - id: try_decode
      type: conditional-decode
      needs: [render]
    - id: encode
      type: encode
      needs:
        - node: try_decode
          if: response.status == 412
      when: request.format != "generate"
      foreach: media
      max_parallel: 4
    - id: prefill
      type: prefill
      needs: [encode]
      retry: {attempts: 2, backoff: 100ms}
    - id: decode
      type: decode
      needs: [prefill]
      params: {failover: {attempts: 2}}   # as the shipped workflows
`},
}

// serveConfig is the `celflow serve` config of f: direct mode, every pool
// the one worker, the default connection settings, info-level JSON logs
// (the production default: one summary line per request is part of the
// cost measured), no tracing.
func serveConfig(f flow, listen, worker string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server: {listen: %q, drain_delay: 0s, shutdown_timeout: 2s}\n", listen)
	fmt.Fprintf(&b, "upstream:\n  mode: direct\n  pools:\n")
	for _, role := range []string{"encode", "prefill", "decode"} {
		fmt.Fprintf(&b, "    %s: [%q]\n", role, worker)
	}
	b.WriteString("telemetry: {log_level: info, log_format: json, tracing: {enabled: false}}\n")
	b.WriteString("workflow:")
	b.WriteString(strings.ReplaceAll(f.yaml, "WORKER", worker))
	return b.String()
}

// writeConfig writes f's config into dir and returns its path.
func writeConfig(dir string, f flow, listen, worker string) (string, error) {
	p := filepath.Join(dir, "serve-"+f.key+".yaml")
	return p, os.WriteFile(p, []byte(serveConfig(f, listen, worker)), 0o644)
}
