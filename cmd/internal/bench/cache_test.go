package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The workload is the same for every arm and every run of a seed, and
// bounded by its options.
func TestCacheWorkloadSeeded(t *testing.T) {
	o := CacheOptions{Convs: 10, Turns: 3, Systems: 2, Conc: 2, Seed: 5}
	s1, c1 := cacheWorkload(o)
	s2, c2 := cacheWorkload(o)
	if len(s1) != 2 || len(c1) != 10 || len(c1[0].turns) != 3 {
		t.Fatalf("sizes %d %d %d", len(s1), len(c1), len(c1[0].turns))
	}
	for i := range c1 {
		if c1[i].system != c2[i].system || !slices.Equal(slices.Concat(c1[i].turns...), slices.Concat(c2[i].turns...)) {
			t.Fatalf("conversation %d differs between two builds of one seed", i)
		}
	}
	if !slices.Equal(s1[1], s2[1]) || len(s1[0]) < 256 || len(s1[0]) > 511 {
		t.Fatalf("system prompts: %d tokens, differ %v", len(s1[0]), !slices.Equal(s1[1], s2[1]))
	}
	_, c3 := cacheWorkload(CacheOptions{Convs: 10, Turns: 3, Systems: 2, Seed: 6})
	if slices.Equal(slices.Concat(c1[0].turns...), slices.Concat(c3[0].turns...)) && c1[0].system == c3[0].system && len(c1[0].turns[0]) == len(c3[0].turns[0]) {
		t.Error("another seed gave the same first conversation")
	}
}

func TestCacheConfig(t *testing.T) {
	sims := []*proc{{url: "http://127.0.0.1:1"}, {url: "http://127.0.0.1:2"}}
	rr := cacheConfig("round-robin", "127.0.0.1:9", sims, nil)
	ev := cacheConfig("events", "127.0.0.1:9", sims, []string{"tcp://127.0.0.1:5", "tcp://127.0.0.1:6"})
	pr := cacheConfig("prediction", "127.0.0.1:9", sims, nil)
	for _, tc := range []struct {
		cfg  string
		want []string
	}{
		{rr, []string{"picker: round-robin", `- "http://127.0.0.1:2"`, "routes: [generate]"}},
		{pr, []string{"picker: cache-aware"}},
		{ev, []string{`- {url: "http://127.0.0.1:1", kv_events: "tcp://127.0.0.1:5"}`, "picker: cache-aware"}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.cfg, w) {
				t.Errorf("config lacks %q:\n%s", w, tc.cfg)
			}
		}
	}
}

// The targets: met, not met, and not measured when the event arm could not
// run (its row says why).
func TestCacheChecks(t *testing.T) {
	arm := func(name string, cached int64, p, r float64) CacheArm {
		return CacheArm{Name: name, Available: true, Prompt: 1000, Cached: cached, Precision: p, Recall: r}
	}
	for _, tc := range []struct {
		name string
		ev   CacheArm
		want []string
	}{
		{"met", arm("events", 815, 0.995, 1), []string{met, met}},
		{"far from the oracle", arm("events", 790, 0.995, 0.999), []string{notMet, met}},
		{"imprecise", arm("events", 830, 0.95, 1), []string{met, notMet}},
		{"unavailable", CacheArm{Name: "events", Note: "not available: celflow-sim has no --kv-events-endpoint", Precision: math.NaN()}, []string{notMeasure, notMeasure}},
	} {
		r := &CacheResult{Arms: []CacheArm{arm("round-robin", 500, math.NaN(), math.NaN()), tc.ev, arm("oracle", 820, 1, 1)}}
		cs := cacheChecks(r)
		if len(cs) != 2 || cs[0].Verdict != tc.want[0] || cs[1].Verdict != tc.want[1] {
			t.Errorf("%s: %+v", tc.name, cs)
		}
		var b bytes.Buffer
		renderCache(&b, r)
		if !strings.Contains(b.String(), "| round-robin | 0 | 50.0% |") {
			t.Errorf("%s: table:\n%s", tc.name, b.String())
		}
		if !tc.ev.Available && !strings.Contains(b.String(), "| events | not available: celflow-sim has no --kv-events-endpoint |") {
			t.Errorf("%s: the event arm's row does not say why:\n%s", tc.name, b.String())
		}
	}
	if cs := cacheChecks(nil); cs[0].Verdict != notMeasure {
		t.Errorf("nil result: %+v", cs)
	}
}

// The cell against the built binaries (make build): every arm that can run
// completes its requests without errors, the routed arms through celflow
// read their precision and recall from its truth check, and cache-aware
// routing beats round-robin's hit rate. Runs when CELFLOW_BIN and
// CELFLOW_BENCH_BIN are set (make test-e2e), not with -short.
func TestCacheCell(t *testing.T) {
	bin, tools := os.Getenv("CELFLOW_BIN"), os.Getenv("CELFLOW_BENCH_BIN")
	if bin == "" || tools == "" || testing.Short() {
		t.Skip("set CELFLOW_BIN and CELFLOW_BENCH_BIN to the built binaries (make build) to run the cache cell")
	}
	args := []string{"--only", "cache", "--cache-convs", "32", "--bin", bin, "--tools-bin", tools}
	if s := os.Getenv("CELFLOW_SIM_BIN"); s != "" {
		args = append(args, "--sim-bin", s)
	} else {
		args = append(args, "--sim-bin", filepath.Join(filepath.Dir(tools), "celflow-sim"))
	}
	var stdout, stderr bytes.Buffer
	if code := Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"## Cache-aware routing", "| round-robin | 128 |", "| prediction | 128 |", "| oracle | 128 |", "| events |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	hit := map[string]float64{}
	for _, ln := range strings.Split(out, "\n") {
		f := strings.Split(ln, "|")
		if len(f) < 11 || !slices.Contains([]string{"round-robin", "prediction", "oracle"}, strings.TrimSpace(f[1])) {
			continue
		}
		if e := strings.TrimSpace(f[10]); e != "0" {
			t.Errorf("%s: %s errors", f[1], e)
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(f[3]), "%"), 64)
		if err != nil {
			t.Fatalf("hit rate of %q: %v", ln, err)
		}
		hit[strings.TrimSpace(f[1])] = v
	}
	if len(hit) != 3 || hit["prediction"] <= hit["round-robin"] || hit["oracle"] < hit["prediction"]-5 {
		t.Errorf("hit rates %v: want prediction above round-robin, the oracle at least about as high\n%s", hit, out)
	}
}
