package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/engine/config"
	"github.com/celflow/celflow/engine/upstream"
	"github.com/celflow/celflow/schema"
)

// checkServe is what `celflow validate --config FILE` and `celflow serve
// --check` run: the serve config, its CELFLOW_* overrides (and any
// CELFLOW_* variable that names no key), the upstream section and the
// workflow it names, loaded exactly as serve loads them (the workflow
// against the real upstream pools, so a role with no pool is caught), but
// going on past the first failing part so every problem is reported in one
// run. tests also runs the workflow's tests: block. The summary describes a
// clean load.
func checkServe(path string, getenv func(string) string, environ []string, tests bool) (schema.Diagnostics, string) {
	p, ds := config.LoadPartial(path, getenv)
	if p == nil {
		return ds, ""
	}
	ds = append(ds, config.UnknownEnv(environ, schema.Error)...)
	var up *upstream.Client
	if p.UpstreamOK {
		var uds schema.Diagnostics
		up, uds = p.NewUpstream()
		ds = append(ds, uds...)
	}
	if !p.WorkflowOK {
		return ds.Sort(), ""
	}
	opts := engine.LoadOptions{Upstream: up, WriteTimeout: p.Server.WriteTimeout}
	var wf *engine.Workflow
	var wds schema.Diagnostics
	if p.Workflow.Inline != nil {
		wf, wds = engine.LoadDoc(p.Workflow.Inline, opts)
	} else {
		wf, wds = engine.LoadFile(p.Workflow.Path, opts)
	}
	ds = append(ds, wds...)
	if wf == nil {
		return ds.Sort(), ""
	}
	if tests {
		ds = append(ds, wf.RunTests(context.Background())...)
	}
	mode := "validate-only"
	if up != nil {
		mode = "gateway"
		if up.Direct() {
			mode = "direct"
		}
	}
	return ds.Sort(), fmt.Sprintf("workflow %s, %d nodes, %d tests, upstream %s", wf.Name(), len(wf.Nodes()), wf.TestCount(), mode)
}

// environ is the process environment as getenv sees it: the entries of
// os.Environ whose name getenv answers (all of them for os.Getenv; tests
// inject a map and see only what both hold).
func environ(getenv func(string) string) []string {
	if getenv == nil {
		return nil
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if getenv(name) != "" {
			out = append(out, kv)
		}
	}
	return out
}
