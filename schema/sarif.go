package schema

import (
	"encoding/json"
	"path/filepath"
	"strings"
)

// SARIF renders ds as a SARIF 2.1.0 log (for code-scanning UIs such as
// GitHub's upload-sarif): one run of tool "celflow", every defined rule in
// tool.driver.rules, one result per diagnostic with its rule, level,
// message and line/column. version goes to tool.driver.version.
func (ds Diagnostics) SARIF(version string) []byte {
	type text struct {
		Text string `json:"text"`
	}
	type rule struct {
		ID                   string            `json:"id"`
		Name                 string            `json:"name"`
		ShortDescription     text              `json:"shortDescription"`
		Help                 text              `json:"help"`
		HelpURI              string            `json:"helpUri"`
		DefaultConfiguration map[string]string `json:"defaultConfiguration"`
	}
	type region struct {
		StartLine   int `json:"startLine"`
		StartColumn int `json:"startColumn"`
	}
	type physical struct {
		ArtifactLocation struct {
			URI string `json:"uri"`
		} `json:"artifactLocation"`
		Region *region `json:"region,omitempty"`
	}
	type location struct {
		PhysicalLocation physical `json:"physicalLocation"`
	}
	type result struct {
		RuleID    string     `json:"ruleId,omitempty"`
		RuleIndex *int       `json:"ruleIndex,omitempty"`
		Level     string     `json:"level"`
		Message   text       `json:"message"`
		Locations []location `json:"locations"`
	}
	all := Rules()
	index := map[string]int{}
	rs := make([]rule, len(all))
	for i, r := range all {
		index[r.ID] = i
		rs[i] = rule{ID: r.ID, Name: sarifName(r.ID), ShortDescription: text{r.Summary}, Help: text{r.Fix},
			HelpURI:              "https://github.com/celflow/celflow/blob/main/docs/workflow-reference.md#rules",
			DefaultConfiguration: map[string]string{"level": "error"}}
	}
	results := make([]result, 0, len(ds))
	for _, d := range ds {
		msg := d.Msg
		if d.Path != "" {
			msg = d.Path + ": " + msg
		}
		if d.Hint != "" {
			msg += " (fix: " + d.Hint + ")"
		}
		r := result{RuleID: d.Rule, Level: d.Severity.String(), Message: text{msg}}
		if i, ok := index[d.Rule]; ok {
			r.RuleIndex = &i
		}
		var loc location
		// A URI reference: slashes, and "<stdin>" (not a valid URI) as "stdin".
		loc.PhysicalLocation.ArtifactLocation.URI = strings.Trim(filepath.ToSlash(d.File), "<>")
		if d.Line > 0 {
			loc.PhysicalLocation.Region = &region{StartLine: d.Line, StartColumn: max(d.Col, 1)}
		}
		r.Locations = []location{loc}
		results = append(results, r)
	}
	log := map[string]any{
		"$schema": "https://json.schemastore.org/sarif-2.1.0.json",
		"version": "2.1.0",
		"runs": []any{map[string]any{
			"tool": map[string]any{"driver": map[string]any{
				"name":           "celflow",
				"version":        version,
				"informationUri": "https://github.com/celflow/celflow",
				"rules":          rs,
			}},
			"results": results,
		}},
	}
	b, _ := json.MarshalIndent(log, "", "  ")
	return b
}

// sarifName turns "cel/undeclared-reference" into "CelUndeclaredReference"
// (SARIF rule names are identifiers).
func sarifName(id string) string {
	var b strings.Builder
	up := true
	for _, r := range id {
		switch {
		case r == '/' || r == '-':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
