// Package buildversion resolves the version string every celflow binary reports
// (`--version`, celflow_build_info, SARIF's driver version) from what the
// build stamped into its main package.
//
// The Makefile stamps each command's main.version with
// `-X main.version=$(VERSION)` (git describe --always --dirty). A main
// package passes that value to Resolve; nothing here is set by the linker,
// so the stamp survives a package move.
package buildversion

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Resolve returns stamped when the build set it; otherwise the module
// version of a `go install module@version` build; otherwise the VCS
// revision Go records for a build inside a git checkout (12 hex digits,
// "-dirty" when the tree had changes); otherwise "dev".
func Resolve(stamped string) string {
	if stamped != "" {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// IsRequest reports whether args ask for the version: `--version`,
// `-version` or `version` as the only argument.
func IsRequest(args []string) bool {
	if len(args) != 1 {
		return false
	}
	switch args[0] {
	case "--version", "-version", "version":
		return true
	}
	return false
}

// Print writes "<name> <version> (<go version> <os>/<arch>)" on one line.
func Print(w io.Writer, name, v string) {
	fmt.Fprintf(w, "%s %s (%s %s/%s)\n", name, v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
