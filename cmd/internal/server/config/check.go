package config

import (
	"sort"
	"strings"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// ToolEnv lists the CELFLOW_* variables that are not serve-config keys: the
// build, test and demo tooling reads them (docs/configuration.md). Every
// other CELFLOW_* variable must name a key.
var ToolEnv = []string{
	"CELFLOW_BENCH_BIN",        // tests: the built celflow-bench binary
	"CELFLOW_BIN",              // tests: the built binary
	"CELFLOW_CACHE",            // .ci/run: where tools are cached
	"CELFLOW_DEMO_BIN",         // tests: the built celflow-demo binary
	"CELFLOW_DEMO_TRACE_CHILD", // demo: internal re-exec marker
	"CELFLOW_SIM_BIN",          // tests: the built celflow-sim binary
	"CELFLOW_TEST_HELPER",      // tests: internal re-exec marker
	"CELFLOW_UPDATE_MEDIA",     // tests: regenerate media goldens
	"CELFLOW_URL",              // e2e node client: where celflow listens
}

// UnknownEnv reports every CELFLOW_* variable of environ ("KEY=value"
// entries, as os.Environ returns) that names no config key and is not a
// tooling variable: a typo such as CELFLOW_SERVER_LISTN would otherwise be
// ignored. Each names the closest key when one is near. The diagnostics
// have severity sev and the variable as their file.
func UnknownEnv(environ []string, sev schema.Severity) schema.Diagnostics {
	known := make(map[string]bool, len(keys)+len(ToolEnv))
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		known[k.Env] = true
		names = append(names, k.Env)
	}
	for _, n := range ToolEnv {
		known[n] = true
	}
	var ds schema.Diagnostics
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "CELFLOW_") || known[name] {
			continue
		}
		msg := "unknown variable: no config key is named " + name
		if s := closest(name, names); s != "" {
			msg += " (did you mean " + s + "?)"
		} else {
			msg += " (`celflow schema config` lists the keys; each is CELFLOW_ + its dotted path in capitals with _)"
		}
		ds = append(ds, schema.Diagnostic{File: name, Msg: msg, Severity: sev, Rule: schema.RuleUnknownVariable})
	}
	return ds.Sort()
}

// closest is the nearest name within a third of the name's length.
func closest(name string, cands []string) string {
	best, bestD := "", 1<<30
	limit := max(2, len(strings.TrimPrefix(name, "CELFLOW_"))/3)
	for _, c := range cands {
		if d := celenv.Distance(name, c); d <= limit && d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// EnvNames lists the variable of every config key, sorted (docs, tests).
func EnvNames() []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.Env)
	}
	sort.Strings(out)
	return out
}
