package metrics

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs /metrics the way Prometheus does and parses the reply with
// the reference text-format parser, legacy (strict) name validation on.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type %q, want the Prometheus text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("text format parse: %v", err)
	}
	return fams
}

// find returns the sample of family name whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("family %s missing", name)
	}
next:
	for _, mt := range f.Metric {
		got := map[string]string{}
		for _, l := range mt.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return mt
	}
	t.Fatalf("%s%v: no such series", name, want)
	return nil
}

func value(mt *dto.Metric) float64 {
	switch {
	case mt.Counter != nil:
		return mt.Counter.GetValue()
	case mt.Gauge != nil:
		return mt.Gauge.GetValue()
	case mt.Histogram != nil:
		return float64(mt.Histogram.GetSampleCount())
	}
	return -1
}

// ACCEPTANCE 4: GET /metrics answers 200 in the Prometheus text format,
// and every celflow series has the documented type and label names.
func TestMetricsEndpoint(t *testing.T) {
	m := New()
	m.ObserveReport("/v1/chat/completions", 200, epdMiss(), nil)
	m.UpstreamHook()("prefill", 200, time.Millisecond, nil)
	m.UpstreamHook()("", 503, time.Millisecond, nil)
	m.ObserveTTFT("/v1/chat/completions", 30*time.Millisecond)
	m.ObserveHandover(150 * time.Microsecond)
	fams := scrape(t, m)

	want := map[string]struct {
		typ    dto.MetricType
		labels string
	}{
		"celflow_requests_total":                {dto.MetricType_COUNTER, "code,route,workflow"},
		"celflow_request_duration_seconds":      {dto.MetricType_HISTOGRAM, "route,workflow"},
		"celflow_requests_in_flight":            {dto.MetricType_GAUGE, ""},
		"celflow_node_duration_seconds":         {dto.MetricType_HISTOGRAM, "node,type,workflow"},
		"celflow_node_outcomes_total":           {dto.MetricType_COUNTER, "node,reason,status,type,workflow"},
		"celflow_upstream_leg_duration_seconds": {dto.MetricType_HISTOGRAM, "role"},
		"celflow_upstream_errors_total":         {dto.MetricType_COUNTER, "kind,role"},
		"celflow_stream_ttft_seconds":           {dto.MetricType_HISTOGRAM, "route"},
		"celflow_handover_seconds":              {dto.MetricType_HISTOGRAM, ""},
		"celflow_fanout_items":                  {dto.MetricType_HISTOGRAM, "node,workflow"},
		"celflow_conditional_decode_total":      {dto.MetricType_COUNTER, "result"},
		"celflow_aggregated_fallback_total":     {dto.MetricType_COUNTER, ""},
		"celflow_prefill_abandoned_total":       {dto.MetricType_COUNTER, ""},
		"celflow_config_reloads_total":          {dto.MetricType_COUNTER, "result"},
		"celflow_build_info":                    {dto.MetricType_GAUGE, "goversion,version"},
		"go_goroutines":                         {dto.MetricType_GAUGE, ""},
	}
	for name, w := range want {
		f := fams[name]
		if f == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if f.GetType() != w.typ {
			t.Errorf("%s type %v, want %v", name, f.GetType(), w.typ)
		}
		var names []string
		for _, l := range f.Metric[0].Label {
			names = append(names, l.GetName())
		}
		sort.Strings(names)
		if got := strings.Join(names, ","); got != w.labels {
			t.Errorf("%s labels %q, want %q", name, got, w.labels)
		}
	}
	if v := value(find(t, fams, "celflow_build_info", nil)); v != 1 {
		t.Errorf("build_info = %v", v)
	}
}

func TestBuildInfoAndReloads(t *testing.T) {
	m := New()
	m.SetBuildInfo("v1.2.3")
	m.ConfigReload(true)
	m.ConfigReload(false)
	m.ConfigReload(false)
	fams := scrape(t, m)
	if n := len(fams["celflow_build_info"].Metric); n != 1 {
		t.Errorf("build_info has %d series, want 1 after SetBuildInfo", n)
	}
	find(t, fams, "celflow_build_info", map[string]string{"version": "v1.2.3"})
	if v := value(find(t, fams, "celflow_config_reloads_total", map[string]string{"result": "failure"})); v != 2 {
		t.Errorf("reload failures = %v", v)
	}
	if v := value(find(t, fams, "celflow_config_reloads_total", map[string]string{"result": "success"})); v != 1 {
		t.Errorf("reload successes = %v", v)
	}
}

func TestInFlight(t *testing.T) {
	m := New()
	done1 := m.InFlight()
	done2 := m.InFlight()
	if v := value(find(t, scrape(t, m), "celflow_requests_in_flight", nil)); v != 2 {
		t.Errorf("in flight = %v, want 2", v)
	}
	done1()
	done2()
	if v := value(find(t, scrape(t, m), "celflow_requests_in_flight", nil)); v != 0 {
		t.Errorf("in flight = %v, want 0", v)
	}
}

// The handler also negotiates formats: a scraper asking for OpenMetrics
// gets it (content type checked only; the text format is the contract).
func TestHandlerOpenMetrics(t *testing.T) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	New().Handler().ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/openmetrics-text") {
		t.Errorf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}

// New labels build_info with Version, which the celflow binary's main sets
// to the version the Makefile stamped; unset, it falls back to the build's
// module version or "dev".
func TestBuildInfoVersion(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "vTEST"
	find(t, scrape(t, New()), "celflow_build_info", map[string]string{"version": "vTEST"})
	Version = ""
	if v := mainVersion(); v == "" || v == "vTEST" {
		t.Errorf("unset Version: build_info version %q", v)
	}
}
