// Package promtest checks celflow's Grafana dashboard and Prometheus alerting
// rules (docs/deploy/helm/celflow/files/) against a real Prometheus that
// scrapes a running celflow: every dashboard query and every rule's measure
// must return data, and every celflow_* name they use must be a series that
// celflow exported. It talks to Prometheus' HTTP API with net/http and
// encoding/json only, so no Prometheus library enters any go.mod.
//
// The end-to-end test (prom_test.go, build tag prom) starts the processes;
// this file is the checking logic, and its pure parts have unit tests that
// need no Prometheus (check_test.go).
package promtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Client is a Prometheus HTTP API client.
type Client struct {
	Base string // http://127.0.0.1:PORT
	HTTP *http.Client
}

// Sample is one element of an instant query's result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

type apiReply struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

func (c *Client) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	u := c.Base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	var r apiReply
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("GET %s: %d %q: %v", path, resp.StatusCode, truncate(string(b), 200), err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// Query evaluates expr at instant at (GET /api/v1/query). A scalar result
// is one sample without labels; a string result is an error.
func (c *Client) Query(ctx context.Context, expr string, at time.Time) ([]Sample, error) {
	q := url.Values{"query": {expr}}
	if !at.IsZero() {
		q.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	}
	data, err := c.get(ctx, "/api/v1/query", q)
	if err != nil {
		return nil, err
	}
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	switch d.ResultType {
	case "vector":
		var vs []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &vs); err != nil {
			return nil, err
		}
		out := make([]Sample, 0, len(vs))
		for _, v := range vs {
			f, err := sampleValue(v.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, Sample{Metric: v.Metric, Value: f})
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return nil, err
		}
		f, err := sampleValue(v)
		if err != nil {
			return nil, err
		}
		return []Sample{{Value: f}}, nil
	}
	return nil, fmt.Errorf("result type %q: a panel or rule query must give a vector or a scalar", d.ResultType)
}

func sampleValue(v [2]any) (float64, error) {
	s, ok := v[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v[1])
	}
	return strconv.ParseFloat(s, 64) // Prometheus spells NaN and ±Inf the way ParseFloat reads them
}

// MetricNames lists every metric name Prometheus holds
// (GET /api/v1/label/__name__/values).
func (c *Client) MetricNames(ctx context.Context) (map[string]bool, error) {
	data, err := c.get(ctx, "/api/v1/label/__name__/values", nil)
	if err != nil {
		return nil, err
	}
	var names []string
	if err := json.Unmarshal(data, &names); err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m, nil
}

// Rule is one rule as Prometheus loaded it (GET /api/v1/rules).
type Rule struct {
	Group          string
	Name           string            `json:"name"`
	Query          string            `json:"query"` // the expression as Prometheus prints it back
	Duration       float64           `json:"duration"`
	Labels         map[string]string `json:"labels"`
	Annotations    map[string]string `json:"annotations"`
	Health         string            `json:"health"`
	LastError      string            `json:"lastError"`
	Type           string            `json:"type"`
	LastEvaluation time.Time         `json:"lastEvaluation"`
}

// Rules lists the loaded rules, in file order.
func (c *Client) Rules(ctx context.Context) ([]Rule, error) {
	data, err := c.get(ctx, "/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	var d struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []Rule `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	var out []Rule
	for _, g := range d.Groups {
		for _, r := range g.Rules {
			r.Group = g.Name
			out = append(out, r)
		}
	}
	return out, nil
}

// Query is one PromQL expression to check and where it comes from.
type Query struct {
	Where string // e.g. `panel 12 "Retries by node and reason" target A`
	Expr  string // ready to evaluate: no Grafana variables left
}

// Dashboard is the part of a Grafana dashboard JSON the check reads.
type Dashboard struct {
	Title      string `json:"title"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Variable is a dashboard template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": "..."} for query variables
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

// Panel is a dashboard panel; rows hold their collapsed panels in Panels.
type Panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Datasource  json.RawMessage `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// Builtins are the values Grafana's interval variables take in the check.
// The window must cover the whole load the test drives (see prom_test.go).
func Builtins(window string) map[string]string {
	return map[string]string{"__rate_interval": window, "__interval": window, "__range": window}
}

// ParseDashboard reads a dashboard and returns every query in it, with the
// template variables substituted: a variable used in a query must offer
// "All" with an allValue (".*", and the query must match it with =~), which
// is what the check evaluates; builtins gives the interval variables.
// Query variables' label_values(selector, label) become
// count by (label) (selector) so that their metric names are checked too.
// It also enforces what every panel must have: a Prometheus datasource
// given by the ${datasource} variable, and a unit.
func ParseDashboard(raw []byte, builtins map[string]string) ([]Query, error) {
	var d Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for k, v := range builtins {
		vars[k] = v
	}
	var errs []error
	hasDatasourceVar := false
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			hasDatasourceVar = true
		case "query", "custom":
			if !v.IncludeAll || v.AllValue == "" {
				errs = append(errs, fmt.Errorf("variable %q: set includeAll and allValue (the check evaluates queries with it)", v.Name))
				continue
			}
			vars[v.Name] = v.AllValue
		default:
			errs = append(errs, fmt.Errorf("variable %q: type %q is not handled by the check", v.Name, v.Type))
		}
	}
	if !hasDatasourceVar {
		errs = append(errs, errors.New("no datasource variable: panels would be bound to one Prometheus"))
	}
	var out []Query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var s string
		if json.Unmarshal(v.Query, &s) != nil {
			var o struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &o); err != nil {
				errs = append(errs, fmt.Errorf("variable %q: query: %v", v.Name, err))
				continue
			}
			s = o.Query
		}
		m := labelValuesRe.FindStringSubmatch(strings.TrimSpace(s))
		if m == nil {
			errs = append(errs, fmt.Errorf("variable %q: query %q is not label_values(selector, label)", v.Name, s))
			continue
		}
		// The variable's own value is not defined while its query runs.
		own := maps(vars, v.Name)
		e, err := Substitute(fmt.Sprintf("count by (%s) (%s)", m[2], m[1]), own)
		if err != nil {
			errs = append(errs, fmt.Errorf("variable %q: %v", v.Name, err))
			continue
		}
		out = append(out, Query{Where: fmt.Sprintf("variable %q", v.Name), Expr: e})
	}
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if !strings.Contains(string(p.Datasource), `"${datasource}"`) {
				errs = append(errs, fmt.Errorf("%s: datasource %s is not the ${datasource} variable", where, p.Datasource))
			}
			if p.FieldConfig.Defaults.Unit == "" {
				errs = append(errs, fmt.Errorf("%s: no unit", where))
			}
			if len(p.Targets) == 0 {
				errs = append(errs, fmt.Errorf("%s: no query", where))
			}
			for _, t := range p.Targets {
				e, err := Substitute(t.Expr, vars)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s target %s: %v", where, t.RefID, err))
					continue
				}
				out = append(out, Query{Where: where + " target " + t.RefID, Expr: e})
			}
		}
	}
	walk(d.Panels)
	return out, errors.Join(errs...)
}

var labelValuesRe = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

func maps(m map[string]string, without string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != without {
			out[k] = v
		}
	}
	return out
}

// varRe matches $name, ${name} and ${name:format} (Grafana's variable syntax).
var varRe = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)(?::[a-z]+)?\}|\$([a-zA-Z0-9_]+)`)

// Substitute replaces Grafana variables in expr by vars; a variable not in
// vars is an error, so no `$` reaches Prometheus.
func Substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := varRe.ReplaceAllStringFunc(expr, func(m string) string {
		sm := varRe.FindStringSubmatch(m)
		name := sm[1] + sm[2]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, "$"+name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("unknown variable(s) %s in %q", strings.Join(missing, ", "), expr)
	}
	return out, nil
}

// nameRe finds celflow's metric names in an expression. Every celflow
// series starts with celflow_, and no label name does; a misspelt prefix
// fails the data check instead.
var nameRe = regexp.MustCompile(`\bcelflow_[a-zA-Z0-9_:]+`)

// Names returns the distinct celflow_* names in expr, in order of appearance.
func Names(expr string) []string {
	var out []string
	for _, n := range nameRe.FindAllString(expr, -1) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// SplitThreshold splits an alerting expression `<measure> <op> <threshold>`
// at its one top-level comparison (outside parentheses, brackets, braces and
// strings) and returns the measure. A rule with no top-level comparison, or
// with more than one, or with a top-level and/or/unless, or whose threshold
// names a celflow series, is refused: its measure could not be told apart,
// and the check could not show that the rule reads live series.
func SplitThreshold(expr string) (measure, op, threshold string, err error) {
	depth := 0
	var quote byte
	type hit struct{ at, n int }
	var cmps []hit
	setOp := false
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		if quote != 0 {
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
			continue
		}
		switch c {
		case '"', '\'', '`':
			quote = c
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case '=', '!', '<', '>':
			if depth != 0 {
				continue
			}
			two := i+1 < len(expr) && expr[i+1] == '='
			switch {
			case c == '=' && two, c == '!' && two:
				cmps = append(cmps, hit{i, 2})
				i++
			case c == '<' || c == '>':
				n := 1
				if two {
					n = 2
				}
				cmps = append(cmps, hit{i, n})
				i += n - 1
			}
		default:
			if depth == 0 && isWordStart(expr, i) {
				for _, w := range []string{"and", "or", "unless"} {
					if strings.HasPrefix(expr[i:], w) && isWordEnd(expr, i+len(w)) {
						setOp = true
					}
				}
			}
		}
	}
	switch {
	case setOp:
		return "", "", "", fmt.Errorf("top-level and/or/unless in %q: write the rule as <measure> <op> <threshold>", expr)
	case len(cmps) == 0:
		return "", "", "", fmt.Errorf("no top-level comparison in %q", expr)
	case len(cmps) > 1:
		return "", "", "", fmt.Errorf("%d top-level comparisons in %q: write the rule as <measure> <op> <threshold>", len(cmps), expr)
	}
	h := cmps[0]
	measure = strings.TrimSpace(expr[:h.at])
	op = expr[h.at : h.at+h.n]
	threshold = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(expr[h.at+h.n:]), "bool"))
	if measure == "" || threshold == "" {
		return "", "", "", fmt.Errorf("empty side around %q in %q", op, expr)
	}
	if len(Names(threshold)) > 0 {
		return "", "", "", fmt.Errorf("threshold %q reads series: keep them in the measure", threshold)
	}
	return measure, op, threshold, nil
}

func isWordStart(s string, i int) bool { return isIdent(s[i]) && (i == 0 || !isIdent(s[i-1])) }
func isWordEnd(s string, i int) bool   { return i >= len(s) || !isIdent(s[i]) }
func isIdent(c byte) bool {
	return c == '_' || c == ':' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Checker evaluates queries against one Prometheus at one instant.
type Checker struct {
	C     *Client
	Names map[string]bool // metric names Prometheus holds (MetricNames)
	At    time.Time       // evaluation instant; zero: now
}

// Check returns why q fails, or nil: a celflow_* name Prometheus does not
// hold, an evaluation error, no series, or only NaN values (a quantile or
// ratio over a window with no observations, meaning the load did not reach
// what the query shows).
func (k *Checker) Check(ctx context.Context, q Query) error {
	var errs []error
	for _, n := range Names(q.Expr) {
		if !k.Names[n] {
			errs = append(errs, fmt.Errorf("%s is not a series the scraped celflow exported", n))
		}
	}
	if err := k.Data(ctx, q); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w\n    query: %s", q.Where, errors.Join(errs...), q.Expr)
}

// Data is the evaluation half of Check: q must give at least one sample
// that is a number.
func (k *Checker) Data(ctx context.Context, q Query) error {
	s, err := k.C.Query(ctx, q.Expr, k.At)
	if err != nil {
		return fmt.Errorf("evaluation failed: %v", err)
	}
	if len(s) == 0 {
		return errors.New("no data (empty result)")
	}
	for _, x := range s {
		if !math.IsNaN(x.Value) {
			return nil
		}
	}
	return fmt.Errorf("only NaN in %d series (no observation in the window)", len(s))
}

// Anchors returns the GitHub anchors of a Markdown document's headings.
func Anchors(md string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// Typo returns name with one letter dropped (the first after "celflow_"),
// the mutation the negative test applies.
func Typo(name string) string {
	const p = "celflow_"
	return p + name[len(p)+1:]
}

// ReplaceName replaces the first whole-token occurrence of name in expr.
func ReplaceName(expr, name, with string) (string, bool) {
	for _, loc := range nameRe.FindAllStringIndex(expr, -1) {
		if expr[loc[0]:loc[1]] == name {
			return expr[:loc[0]] + with + expr[loc[1]:], true
		}
	}
	return expr, false
}

// SortedKeys is a map's keys, sorted.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
