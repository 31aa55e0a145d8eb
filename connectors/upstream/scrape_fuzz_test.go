package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// vllmPage is a /metrics page of the size and shape vLLM serves: for each
// model_name (and engine) its gauges, counters and latency histograms,
// about 300 series per model, with HELP and TYPE lines.
func vllmPage(models int) []byte {
	var b bytes.Buffer
	hist := []string{"vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
		"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
		"vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:iteration_tokens_total"}
	les := []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf"}
	gauge := func(name string, v func(m int) float64) {
		fmt.Fprintf(&b, "# HELP %s Number of requests.\n# TYPE %s gauge\n", name, name)
		for m := range models {
			fmt.Fprintf(&b, "%s{engine=\"0\",model_name=\"org/model-%d\"} %s\n", name, m, strings.TrimSuffix(fmt.Sprintf("%.1f", v(m)), ""))
		}
	}
	gauge(metricRunning, func(m int) float64 { return float64(3 + m) })
	gauge(metricWaiting, func(m int) float64 { return float64(m) })
	gauge("vllm:kv_cache_usage_perc", func(m int) float64 { return 0.25 })
	for _, c := range []string{"vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"} {
		fmt.Fprintf(&b, "# HELP %s A counter.\n# TYPE %s counter\n", c, c)
		for m := range models {
			fmt.Fprintf(&b, "%s{engine=\"0\",model_name=\"org/model-%d\"} 123456.0\n", c, m)
		}
	}
	for _, h := range hist {
		fmt.Fprintf(&b, "# HELP %s Histogram of something.\n# TYPE %s histogram\n", h, h)
		for m := range models {
			for i, le := range les {
				fmt.Fprintf(&b, "%s_bucket{engine=\"0\",le=\"%s\",model_name=\"org/model-%d\"} %d.0\n", h, le, m, 10*(i+1))
			}
			fmt.Fprintf(&b, "%s_count{engine=\"0\",model_name=\"org/model-%d\"} 200.0\n%s_sum{engine=\"0\",model_name=\"org/model-%d\"} 31.5\n", h, m, h, m)
		}
		fmt.Fprintf(&b, "# HELP %s_created Created.\n# TYPE %s_created gauge\n", h, h)
		for m := range models {
			fmt.Fprintf(&b, "%s_created{engine=\"0\",model_name=\"org/model-%d\"} 1.7e+09\n", h, m)
		}
	}
	return b.Bytes()
}

// A real-sized page with two model_names: each gauge is the sum of its
// series, as before the library parsed it.
func TestParseLoadVLLMPage(t *testing.T) {
	page := vllmPage(2)
	r, w, err := parseLoad(bytes.NewReader(page))
	if err != nil || r != 3+4 || w != 0+1 {
		t.Fatalf("running %v waiting %v err %v, want 7 1", r, w, err)
	}
}

func TestParseLoadCases(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		run, wait  float64
		errPart    string
	}{
		{"untyped, timestamp", "vllm:num_requests_running 2 1700000000000\n", 2, 0, ""},
		{"only waiting", "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"a\"} 5\n", 0, 5, ""},
		{"NaN and negative left out", "vllm:num_requests_running{e=\"0\"} NaN\nvllm:num_requests_running{e=\"1\"} -1\nvllm:num_requests_running{e=\"2\"} 2\nvllm:num_requests_waiting 1\n", 2, 1, ""},
		{"a label value holding the name", "other{x=\"vllm:num_requests_running 9\"} 1\nvllm:num_requests_waiting 1\n", 0, 1, ""},
		{"no gauges", "up 1\n", 0, 0, "no vllm:num_requests_running"},
		{"a bad line fails the page", "vllm:num_requests_running 1\nvllm:num_requests_waiting{ 2\n", 0, 0, "line 2"},
		{"no final newline", "vllm:num_requests_running 1", 0, 0, "unexpected end"},
	} {
		r, w, err := parseLoad(strings.NewReader(tc.text))
		if tc.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.errPart)
			}
			continue
		}
		if err != nil || r != tc.run || w != tc.wait {
			t.Errorf("%s: %v %v %v, want %v %v", tc.name, r, w, err, tc.run, tc.wait)
		}
	}
}

// endless is a /metrics reply that never ends: sample lines forever.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	line := "vllm:num_requests_running{engine=\"0\"} 1\n"
	n := 0
	for n < len(p) {
		c := copy(p[n:], line[int(e.n%int64(len(line))):])
		n += c
		e.n += int64(c)
	}
	return n, nil
}

// A page longer than scrapeMaxBody is refused after reading one byte past
// the bound, and what the parser holds meanwhile stays within a bounded
// multiple of it; a page of exactly the bound is read.
func TestParseLoadBounded(t *testing.T) {
	src := &endless{}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := parseLoad(src)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errPageTooLarge) {
		t.Fatalf("err %v, want errPageTooLarge", err)
	}
	if src.n > scrapeMaxBody+64<<10 {
		t.Errorf("read %d bytes of an endless page, bound %d", src.n, scrapeMaxBody)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 96*scrapeMaxBody {
		t.Errorf("allocated %d bytes for an endless page bounded at %d", alloc, scrapeMaxBody)
	}
	// The parser's worst case: the shortest series there are, as many as
	// the bound lets in.
	tiny := strings.Repeat("a 1\n", scrapeMaxBody/4)
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err = parseLoad(strings.NewReader(tiny))
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d-byte page of tiny series: %v, allocated %d MiB", len(tiny), err, alloc>>20)
	if alloc > 96*scrapeMaxBody {
		t.Errorf("allocated %d bytes for a %d-byte page", alloc, len(tiny))
	}
	line := "vllm:num_requests_waiting 1\n"
	exact := strings.Repeat(line, scrapeMaxBody/len(line))
	exact += strings.Repeat("\n", scrapeMaxBody-len(exact))
	if r, w, err := parseLoad(strings.NewReader(exact)); err != nil || r != 0 || w != float64(scrapeMaxBody/len(line)) {
		t.Errorf("page of exactly the bound: %v %v %v", r, w, err)
	}
	if _, _, err := parseLoad(strings.NewReader(exact + "\n")); !errors.Is(err, errPageTooLarge) {
		t.Errorf("page one byte over the bound: %v", err)
	}
}

// BenchmarkParseLoad: one scrape of a vLLM-sized page (two model_names,
// about 600 series with histograms).
func BenchmarkParseLoad(b *testing.B) {
	page := vllmPage(2)
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := parseLoad(bytes.NewReader(page)); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseLoad: on any page, parseLoad never panics, and its answer is
// the library's: when expfmt accepts the page, the figures are the sums of
// the gauges' finite non-negative samples (and an error when there is no
// such sample); when expfmt refuses it, so does parseLoad.
func FuzzParseLoad(f *testing.F) {
	f.Add(vllmPage(1))
	f.Add([]byte("vllm:num_requests_running{engine=\"0\"} 1 1700000000\nvllm:num_requests_running{engine=\"1\"} 4\nvllm:num_requests_running_total 99\nvllm:num_requests_waiting 0\n"))
	f.Add([]byte("# TYPE vllm:num_requests_waiting counter\nvllm:num_requests_waiting 3e2\n"))
	f.Add([]byte("{\"vllm:num_requests_running\",engine=\"0\"} +Inf\nvllm:num_requests_waiting NaN\n"))
	f.Add([]byte("# TYPE vllm:num_requests_running histogram\nvllm:num_requests_running_bucket{le=\"+Inf\"} 1\nvllm:num_requests_running_count 1\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		r, w, err := parseLoad(bytes.NewReader(page))
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, perr := p.TextToMetricFamilies(bytes.NewReader(page))
		if perr != nil {
			if err == nil {
				t.Fatalf("expfmt refuses the page (%v), parseLoad answered %v %v", perr, r, w)
			}
			return
		}
		var want [2]float64
		seen := false
		for i, name := range []string{metricRunning, metricWaiting} {
			mf := families[name]
			if mf == nil {
				continue
			}
			for _, m := range mf.GetMetric() {
				var v float64
				switch {
				case m.Gauge != nil:
					v = m.Gauge.GetValue()
				case m.Untyped != nil:
					v = m.Untyped.GetValue()
				case m.Counter != nil:
					v = m.Counter.GetValue()
				default:
					continue
				}
				if math.IsNaN(v) || v < 0 {
					continue
				}
				want[i] += v
				seen = true
			}
		}
		if !seen {
			if !errors.Is(err, errNoLoadGauges) {
				t.Fatalf("no gauge sample: got %v %v %v", r, w, err)
			}
			return
		}
		if err != nil || r != want[0] || w != want[1] {
			t.Fatalf("got %v %v %v, want %v %v", r, w, err, want[0], want[1])
		}
	})
}

var _ io.Reader = (*endless)(nil)

// Over real HTTP: the scrape asks for the text format it parses, sums a
// vLLM page's gauges, and refuses a page over the bound.
func TestScrapeLoadHTTP(t *testing.T) {
	page := vllmPage(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Accept"); !strings.HasPrefix(a, "text/plain") || !strings.Contains(a, "version=0.0.4") {
			http.Error(w, "asked for "+a, http.StatusNotAcceptable)
			return
		}
		w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
		if r.URL.Query().Has("huge") {
			for i := 0; i < scrapeMaxBody/32; i++ {
				fmt.Fprintf(w, "vllm:num_requests_running{engine=\"%d\"} 1\n", i)
			}
			return
		}
		_, _ = w.Write(page)
	}))
	defer srv.Close()
	hc := srv.Client()
	r, w, err := scrapeLoad(hc, srv.URL+"/metrics", 10*time.Second)
	if err != nil || r != 7 || w != 1 {
		t.Fatalf("running %v waiting %v err %v, want 7 1", r, w, err)
	}
	if _, _, err := scrapeLoad(hc, srv.URL+"/metrics?huge=1", 10*time.Second); !errors.Is(err, errPageTooLarge) {
		t.Fatalf("a page over the bound: %v", err)
	}
}
