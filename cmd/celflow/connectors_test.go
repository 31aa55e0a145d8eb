package main

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/celflow/celflow/connectors/ec"
	"github.com/celflow/celflow/connectors/kv"
	"github.com/celflow/celflow/schema"
)

// The workflow schema lists the connector names for defaults.kv_connector
// and defaults.ec_connector, so that an unknown name fails at its position
// even when no node uses it (ACCEPTANCE 28). The engine cannot import the
// connector registries (imports flow cmd → engine → schema), so this test
// keeps the two lists equal.
func TestWorkflowSchemaConnectorNames(t *testing.T) {
	src, ok := schema.Source(schema.WorkflowID)
	if !ok {
		t.Fatal("no workflow schema")
	}
	var doc struct {
		Properties struct {
			Defaults struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"defaults"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	for key, names := range map[string][]string{"kv_connector": kv.Names(), "ec_connector": ec.Names()} {
		got := slices.Sorted(slices.Values(doc.Properties.Defaults.Properties[key].Enum))
		want := slices.Sorted(slices.Values(names))
		if !slices.Equal(got, want) {
			t.Errorf("workflow.json defaults.%s enum %q, registered connectors %q", key, got, want)
		}
	}
}
