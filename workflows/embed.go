// Package workflows holds the workflows celflow ships (one YAML file each,
// described in docs/workflows.md) and embeds them, so that `celflow demo`
// and the end-to-end tests run exactly the files users copy.
package workflows

import "embed"

// FS holds every shipped workflow, by file name ("epd.yaml").
//
//go:embed *.yaml
var FS embed.FS

// Names lists the shipped workflow files, sorted.
func Names() []string {
	ents, _ := FS.ReadDir(".")
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
