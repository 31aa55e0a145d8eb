package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       time.Duration
		bad        bool
	}{
		{"plain", "123 (celflow) S 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0", 1750 * time.Millisecond, false},
		{"name with spaces and parens", "9 (a) b) c) R 1 2 3 4 5 6 7 8 9 10 3 4 0 0", 70 * time.Millisecond, false},
		{"truncated", "9 (x) R 1 2", 0, true},
		{"no name", "9 x R", 0, true},
	} {
		got, err := parseStatCPU([]byte(tc.line))
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%s: %v %v, want %v (error %v)", tc.name, got, err, tc.want, tc.bad)
		}
	}
}

const sampleBench = `goos: linux
goarch: amd64
pkg: github.com/celflow/celflow/engine
cpu: AMD EPYC
BenchmarkWalkEPD-2          	  500000	      2512 ns/op	     912 B/op	      27 allocs/op
BenchmarkCompileEPD-2       	    2000	    612345 ns/op
PASS
ok  	github.com/celflow/celflow/engine	3.1s
pkg: github.com/celflow/celflow/nodes/fetchmedia
BenchmarkFetchMediaInline1MB-2   	     300	   1000000 ns/op	 1048.58 MB/s	 2621440 B/op	      40 allocs/op
BenchmarkDecodeBodyChat/200KB-2  	    3000	     41000 ns/op	   5000 B/op	       3 allocs/op
pkg: github.com/celflow/celflow/cmd/internal/bench
BenchmarkServe/pd/image1MB-2     	     200	   8000000 ns/op	 131.07 MB/s	 2000000 B/op	     525 allocs/op
--- FAIL: BenchmarkBroken
`

func TestParseGoBench(t *testing.T) {
	bs := parseGoBench(sampleBench)
	want := []GoBench{
		{"github.com/celflow/celflow/engine", "WalkEPD", 2512, 912, 27, 0},
		{"github.com/celflow/celflow/engine", "CompileEPD", 612345, -1, -1, 0},
		{"github.com/celflow/celflow/nodes/fetchmedia", "FetchMediaInline1MB", 1e6, 2621440, 40, 1048.58},
		{"github.com/celflow/celflow/nodes/fetchmedia", "DecodeBodyChat/200KB", 41000, 5000, 3, 0},
		{"github.com/celflow/celflow/cmd/internal/bench", "Serve/pd/image1MB", 8e6, 2e6, 525, 131.07},
	}
	if len(bs) != len(want) {
		t.Fatalf("got %d results: %+v", len(bs), bs)
	}
	for i := range want {
		if bs[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, bs[i], want[i])
		}
	}
}

// A rendered section keeps its raw lines, so a later run without Go reads
// the same numbers back; extractSection finds it inside a whole report.
func TestGoBenchSectionRoundTrip(t *testing.T) {
	sec := renderGoBench(parseGoBench(sampleBench), sampleBench, Machine{Commit: "abc"}, nil)
	doc := "# x\n\nbefore\n" + sec + "\nafter\n"
	got := extractSection(doc)
	if got != sec {
		t.Fatalf("extracted %q", got)
	}
	if back := sectionBench(got); len(back) != 5 || back[0].Name != "WalkEPD" || back[2].BOp != 2621440 {
		t.Errorf("re-read %+v", back)
	}
	if extractSection("no markers") != "" {
		t.Error("section found where there is none")
	}
}

// synthetic is a run with the proxy at 1000 req/s and celflow at the
// given fractions of it, at concurrency 16 and 64, both bodies.
func synthetic(decode, pd float64) *Results {
	r := &Results{Opts: Options{Conc: []int{1, 16, 64}, StreamConc: []int{1}, Duration: time.Second}, Bodies: bodies()}
	r.Targets = []target{{key: "direct", title: "direct"}, {key: "proxy", title: "proxy", legs: 1},
		{key: "decode", title: "decode", legs: 1, celflow: true}, {key: "pd", title: "pd", legs: 2, celflow: true}}
	lat := func(d time.Duration) Dist { return Dist{N: 1, P50: d, P99: 2 * d} }
	for _, conc := range r.Opts.Conc {
		for _, b := range r.Bodies {
			add := func(key string, ok int, p50 time.Duration, h handover) {
				r.Cells = append(r.Cells, Cell{Conc: conc, Body: b.key, Target: key, Handover: h,
					Res: Result{OK: ok, Window: time.Second, Latency: lat(p50)}})
			}
			add("direct", 2000, 100*time.Microsecond, handover{})
			add("proxy", 1000, 250*time.Microsecond, handover{})
			add("decode", int(1000*decode), 350*time.Microsecond, handover{})
			add("pd", int(1000*pd), 500*time.Microsecond, handover{Sum: 0.0001 * 10, Count: 10, Within02: 9})
		}
	}
	st := func(first, lat time.Duration, coalesced int) StreamResult {
		return StreamResult{Streams: 10, Events: 200, Coalesced: coalesced, FirstChunk: Dist{P50: first}, ChunkLat: Dist{P50: lat, P99: 2 * lat, Max: 3 * lat}}
	}
	r.Streams = []StreamCell{
		{1, "direct", st(300*time.Microsecond, 50*time.Microsecond, 0)},
		{1, "decode", st(500*time.Microsecond, 120*time.Microsecond, 0)},
		{1, "pd", st(900*time.Microsecond, 700*time.Microsecond, 3)},
	}
	return r
}

func TestChecks(t *testing.T) {
	r := synthetic(0.95, 0.5)
	gb := parseGoBench(sampleBench)
	got := map[string]Check{}
	for _, c := range Checks(r, gb, Machine{BinBytes: 20_000_000}) {
		got[c.Target] = c
	}
	for _, tc := range []struct{ target, measured, verdict string }{
		{"decode-only ≥ 0.80× bare proxy, c=64, small body", "0.95×", met},
		{"decode-only ≥ 0.92× bare proxy, c=16, 200 KB prompt", "0.95×", met},
		{"prefill→decode ≥ 0.40× bare proxy, c=64, small body", "0.50×", met},
		{"prefill→decode ≥ 0.58× bare proxy, c=16, small body", "0.50×", notMet},
		{"prefill→decode ≥ 0.55× bare proxy, c=16, 200 KB prompt", "0.50×", notMet},
		// (350 − 100) µs for one leg; (500 − 2·100) / 2 = 150 µs per leg.
		{"decode: added p50 < 0.3 ms per hop, c=1, small body", "0.250 ms (bare proxy 0.150 ms)", met},
		{"pd: added p50 < 0.3 ms per hop, c=1, small body", "0.150 ms (bare proxy 0.150 ms)", met},
		{"decode stream: ≤ 0.3 ms added to the first byte (p50), c=1", "0.200 ms", met},
		{"decode stream: ≤ 0.3 ms added to each chunk (p50), c=1", "0.070 ms", met},
		{"decode stream: no coalescing, each chunk within 1 ms (p99), c=1", "0.0% of events coalesced (direct 0.0%); chunk latency p99 0.240 ms, max 0.360 ms", met},
		{"pd stream: ≤ 0.3 ms added to each chunk (p50), c=1", "0.650 ms", notMet},
		{"hand-over (prefill answer → decode on the wire) ≤ 0.2 ms, prefill→decode", "mean 0.100 ms over 60 requests, 90.0% ≤ 0.2 ms", met},
		{"engine walk of the full E/P/D graph ≤ 3 µs and ≤ 30 allocs (issue floor 40)", "2.51 µs, 27 allocs", met},
		{"bytes allocated per request, 1 MB image body, < 3× the body (prefill→decode, whole request)", "1.91× (2000000 B/op for a 1048560-byte body)", met},
		{"binary ≤ 25 MB (MiB)", "19.1 MiB (20.0 MB)", met},
	} {
		c, ok := got[tc.target]
		if !ok {
			t.Errorf("no check %q", tc.target)
			continue
		}
		if c.Measured != tc.measured || c.Verdict != tc.verdict {
			t.Errorf("%s: got %q %q, want %q %q", tc.target, c.Measured, c.Verdict, tc.measured, tc.verdict)
		}
	}
	if c := got["pd stream: no coalescing, each chunk within 1 ms (p99), c=1"]; c.Verdict != notMet {
		t.Errorf("coalesced stream judged %q", c.Verdict)
	}
	if _, ok := got["pd stream: ≤ 0.3 ms added to the first byte (p50), c=1"]; ok {
		t.Error("first-byte budget applied to prefill→decode, whose first byte waits for prefill")
	}
}

// Cells that did not run are "not measured", never met.
func TestChecksMissing(t *testing.T) {
	r := &Results{Opts: Options{Conc: []int{1}}}
	for _, c := range Checks(r, nil, Machine{}) {
		if c.Verdict != notMeasure {
			t.Errorf("%s: %q with nothing measured", c.Target, c.Verdict)
		}
	}
}

func TestRender(t *testing.T) {
	r := synthetic(0.95, 0.5)
	sec := renderGoBench(parseGoBench(sampleBench), sampleBench, Machine{}, nil)
	doc := Render(r, Machine{CPUs: 2, Model: "AMD EPYC", Commit: "abc123", GoVersion: "go1.26.8"}, sec)
	for _, want := range []string{
		"| commit | abc123 |", "## Targets", "## Concurrency 16", "### 200 KB prompt",
		"| pd | 2 | 500 | 0.50 | 0.500 ms | 1.000 ms | 0.150 ms |", "## Streaming", "## Hand-over", sec,
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Count(doc, goBenchBegin) != 1 {
		t.Error("go-bench section not exactly once")
	}
	// Without a section, a placeholder with the markers is written.
	if doc := Render(r, Machine{}, ""); extractSection(doc) == "" {
		t.Error("no placeholder section")
	}
}

// The failover section is rewritten in place, put before the Go
// micro-benchmarks the first time, and kept by a full run's Render.
func TestWriteFailoverSection(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "b.md")
	sec := func(s string) string { return failoverBegin + "\n" + s + "\n" + failoverEnd }
	for _, tc := range []struct{ name, before, section, want string }{
		{"empty", "", sec("one"), "\n" + sec("one") + "\n"},
		{"before the go section", "# B\n" + goBenchBegin + "\ngo\n" + goBenchEnd + "\n", sec("one"),
			"# B\n" + sec("one") + "\n\n" + goBenchBegin + "\ngo\n" + goBenchEnd + "\n"},
		{"in place", "# B\n" + sec("old") + "\ntail\n", sec("new"), "# B\n" + sec("new") + "\ntail\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(out, []byte(tc.before), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := writeFailover(out, tc.section); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(out)
			if string(got) != tc.want {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
			if extractFailover(string(got)) != tc.section {
				t.Fatalf("extract: %q", extractFailover(string(got)))
			}
		})
	}
}
