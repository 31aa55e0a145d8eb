package bench

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// GoBench is one result line of `go test -bench`.
type GoBench struct {
	Pkg      string // import path
	Name     string // without the Benchmark prefix and the -N suffix
	NsOp     float64
	BOp      float64 // -1 when not reported
	AllocsOp float64 // -1 when not reported
	MBs      float64 // 0 when not reported
}

// goBenchPkgs are the hot-path packages: the engine walk, CEL guards, jsonb,
// the upstream client and SSE relay, media scanning, body building per leg;
// and this one, whose BenchmarkServe is a whole request through the front,
// the engine and the nodes (the per-request allocation budget).
var goBenchPkgs = []string{"./engine/...", "./nodes/...", "./cmd/internal/bench"}

// runGoBench runs the micro-benchmarks in the module at dir and parses them.
// The command's output is returned as well, for the error case.
func runGoBench(ctx context.Context, dir string) ([]GoBench, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	args := append([]string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", "300ms", "-count", "1"}, goBenchPkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	bs := parseGoBench(string(out))
	if err != nil {
		return bs, string(out), fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return bs, string(out), nil
}

// parseGoBench reads `go test -bench` output: "pkg:" lines name the package
// of the Benchmark lines after them.
func parseGoBench(out string) []GoBench {
	var bs []GoBench
	pkg := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "ns/op" {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		b := GoBench{Pkg: pkg, Name: name, BOp: -1, AllocsOp: -1}
		b.NsOp, _ = strconv.ParseFloat(f[2], 64)
		for i := 4; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "B/op":
				b.BOp = v
			case "allocs/op":
				b.AllocsOp = v
			case "MB/s":
				b.MBs = v
			}
		}
		bs = append(bs, b)
	}
	return bs
}

// findGoBench returns the first result whose name is name.
func findGoBench(bs []GoBench, name string) (GoBench, bool) {
	for _, b := range bs {
		if b.Name == name {
			return b, true
		}
	}
	return GoBench{}, false
}
