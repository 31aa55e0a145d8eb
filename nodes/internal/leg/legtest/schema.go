package legtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/celflow/celflow/schema"
)

// CheckSchema registers a node type's params schema with celflow's schema
// registry (draft 2020-12, Go durations, int64 integers: the loader's own
// rules) and checks that each of valid validates and each of invalid does not.
func CheckSchema(t *testing.T, nodeType string, src []byte, valid, invalid []string) {
	t.Helper()
	id := schema.NodeSchemaID(nodeType)
	if err := schema.Register(id, src); err != nil {
		t.Fatal(err)
	}
	s, err := schema.Compiled(id)
	if err != nil {
		t.Fatal(err)
	}
	check := func(doc string, want bool) {
		var v any
		dec := json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if err := s.Validate(v); (err == nil) != want {
			t.Errorf("%s: valid=%v, want %v (%v)", doc, err == nil, want, err)
		}
	}
	for _, d := range valid {
		check(d, true)
	}
	for _, d := range invalid {
		check(d, false)
	}
}
