package engine

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/celflow/celflow/schema"
)

// A workflow field is declared once: the typed document (loaddoc.go), the
// JSON Schema (schema/workflow.json) and the reference's field tables
// (docs/workflow-reference.md) name the same keys. Adding a field to one
// and not the others fails here.
func TestDocDeclaredOnce(t *testing.T) {
	src, err := os.ReadFile("../schema/workflow.json")
	if err != nil {
		t.Fatal(err)
	}
	var ws map[string]any
	if err := json.Unmarshal(src, &ws); err != nil {
		t.Fatal(err)
	}
	defs := ws["$defs"].(map[string]any)
	props := func(s any) []string {
		var out []string
		for k := range s.(map[string]any)["properties"].(map[string]any) {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	rootProps := ws["properties"].(map[string]any)
	need := defs["need"].(map[string]any)["oneOf"].([]any)[1]
	doc, err := os.ReadFile("../docs/workflow-reference.md")
	if err != nil {
		t.Fatal(err)
	}
	tables := docTables(string(doc))
	for _, tc := range []struct {
		name   string
		typ    any
		schema any
		table  string // doc table key: section heading + index
	}{
		{"workflow", workflowDoc{}, ws, "Top-level fields#0"},
		{"metadata", metadataDoc{}, rootProps["metadata"], ""},
		{"defaults", defaultsFieldsDoc{}, rootProps["defaults"], "Top-level fields#1"},
		{"node", nodeDoc{}, defs["node"], "Node fields#0"},
		{"need", needDoc{}, need, ""},
		{"retry", retryDoc{}, defs["retry"], "Timeouts and retries#0"},
		{"test", testDoc{}, defs["test"], ""},
		{"test.request", testRequestDoc{}, defs["test"].(map[string]any)["properties"].(map[string]any)["request"], ""},
		{"test.expect", testExpectDoc{}, defs["test"].(map[string]any)["properties"].(map[string]any)["expect"], ""},
	} {
		fields := structKeys(reflect.TypeOf(tc.typ))
		if want := props(tc.schema); !slices.Equal(fields, want) {
			t.Errorf("%s: struct fields %v, schema properties %v", tc.name, fields, want)
		}
		if tc.table == "" {
			continue
		}
		rows := tables[tc.table]
		if !slices.Equal(fields, rows) {
			t.Errorf("%s: struct fields %v, docs/workflow-reference.md table %q rows %v", tc.name, fields, tc.table, rows)
		}
	}
}

func structKeys(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if n := schema.JSONName(t.Field(i)); n != "" && n != "-" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

var rowRE = regexp.MustCompile("^\\| `([a-zA-Z_]+)[`.]")

// docTables maps "Heading#k" to the sorted, distinct first-column field
// names of the k-th field table (one whose header starts "| field") under
// that level-2 heading; other tables (params, rules) are not counted.
func docTables(doc string) map[string][]string {
	out := map[string][]string{}
	heading, k, inTable, fieldTable := "", -1, false, false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			heading, k, inTable = strings.TrimPrefix(line, "## "), -1, false
		case strings.HasPrefix(line, "|"):
			if !inTable {
				inTable = true
				fieldTable = strings.HasPrefix(line, "| field ")
				if fieldTable {
					k++
				}
			}
			if m := rowRE.FindStringSubmatch(line); m != nil && fieldTable {
				key := heading + "#" + string(rune('0'+k))
				if !slices.Contains(out[key], m[1]) {
					out[key] = append(out[key], m[1])
				}
			}
		default:
			inTable = false
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

var ruleRowRE = regexp.MustCompile("^\\| `([a-z]+/[a-z0-9-]+)` \\|")

// Every rule id is documented in docs/workflow-reference.md#rules, and
// every documented id exists.
func TestRulesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/workflow-reference.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, line := range strings.Split(string(doc), "\n") {
		if m := ruleRowRE.FindStringSubmatch(line); m != nil {
			documented = append(documented, m[1])
		}
	}
	var defined []string
	for _, r := range schema.Rules() {
		defined = append(defined, r.ID)
		if r.Summary == "" || r.Fix == "" {
			t.Errorf("rule %s lacks a summary or a fix", r.ID)
		}
	}
	slices.Sort(documented)
	if !slices.Equal(documented, defined) {
		t.Errorf("documented rules %v\ndefined rules %v", documented, defined)
	}
}
