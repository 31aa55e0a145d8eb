package promtest

import (
	"strings"
	"testing"
)

func TestSplitThreshold(t *testing.T) {
	for _, c := range []struct{ in, measure, op, threshold string }{
		{`min by (pool) (celflow_endpoints_healthy) == 0`, `min by (pool) (celflow_endpoints_healthy)`, "==", "0"},
		{`x{code=~"5..",a!="b"} / y > 0.05`, `x{code=~"5..",a!="b"} / y`, ">", "0.05"},
		{"min(celflow_tls_certificate_expiry_timestamp_seconds) - time() < 14 * 86400",
			"min(celflow_tls_certificate_expiry_timestamp_seconds) - time()", "<", "14 * 86400"},
		{`(a or 0 * b) / b >= 1`, `(a or 0 * b) / b`, ">=", "1"},
		{`a{l=">"} <= bool 3`, `a{l=">"}`, "<=", "3"},
		{`sum(rate(celflow_x_total{reason=~"a|b"}[5m])) != 0`, `sum(rate(celflow_x_total{reason=~"a|b"}[5m]))`, "!=", "0"},
	} {
		m, op, th, err := SplitThreshold(c.in)
		if err != nil || m != c.measure || op != c.op || th != c.threshold {
			t.Errorf("SplitThreshold(%q) = %q, %q, %q, %v; want %q, %q, %q", c.in, m, op, th, err, c.measure, c.op, c.threshold)
		}
	}
	for _, in := range []string{
		`sum(celflow_x)`,        // no comparison
		`a > 1 and b > 2`,       // set operator
		`a > 1 unless b`,        // set operator
		`celflow_a > celflow_b`, // series in the threshold
		`a > 1 > 2`,             // two comparisons
		`a or b > 1`,            // set operator binds loosest
		`(a > 1) or (b > 1)`,    // set operator
		`> 1`,                   // no measure
	} {
		if m, _, _, err := SplitThreshold(in); err == nil {
			t.Errorf("SplitThreshold(%q) = %q, nil; want an error", in, m)
		}
	}
}

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"job": ".*", "__rate_interval": "2m"}
	got, err := Substitute(`rate(x{job=~"$job"}[$__rate_interval]) + rate(y{job=~"${job}"}[${__rate_interval}])`, vars)
	if want := `rate(x{job=~".*"}[2m]) + rate(y{job=~".*"}[2m])`; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	if _, err := Substitute(`x{pool=~"$pool"}`, vars); err == nil || !strings.Contains(err.Error(), "$pool") {
		t.Errorf("an unknown variable: err = %v", err)
	}
}

func TestNamesAndTypo(t *testing.T) {
	e := `sum(rate(celflow_a_total{x="y"}[1m])) / sum(rate(celflow_a_total[1m])) + celflow_b_bucket`
	if got := strings.Join(Names(e), ","); got != "celflow_a_total,celflow_b_bucket" {
		t.Errorf("Names = %s", got)
	}
	if got := Typo("celflow_requests_total"); got != "celflow_equests_total" {
		t.Errorf("Typo = %s", got)
	}
	got, ok := ReplaceName(e, "celflow_a_total", "celflow_z")
	if !ok || got != `sum(rate(celflow_z{x="y"}[1m])) / sum(rate(celflow_a_total[1m])) + celflow_b_bucket` {
		t.Errorf("ReplaceName = %q, %v", got, ok)
	}
	if _, ok := ReplaceName(e, "celflow_a", "q"); ok {
		t.Error("ReplaceName matched a prefix of a name")
	}
}

func TestAnchors(t *testing.T) {
	a := Anchors("# Top\n## Dashboards and alerts\n```\n# not a heading\n```\n#### CelflowErrorRatioHigh\n### The `x` listener (y)\n")
	for _, w := range []string{"top", "dashboards-and-alerts", "celflowerrorratiohigh", "the-x-listener-y"} {
		if !a[w] {
			t.Errorf("anchor %q missing from %v", w, SortedKeys(a))
		}
	}
	if a["not-a-heading"] {
		t.Error("a fenced line became an anchor")
	}
}

func TestParseDashboardRefusals(t *testing.T) {
	raw := `{"templating":{"list":[{"name":"job","type":"query","query":"label_values(up, job)"}]},
	 "panels":[{"id":1,"type":"timeseries","title":"t","datasource":{"uid":"prom"},"targets":[{"refId":"A","expr":"x{job=~\"$job\"}"}]}]}`
	_, err := ParseDashboard([]byte(raw), Builtins("1m"))
	for _, w := range []string{"allValue", "no datasource variable", "not the ${datasource} variable", "no unit", "$job"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not mention %q", err, w)
		}
	}
}
