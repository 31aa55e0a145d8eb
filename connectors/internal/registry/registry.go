// Package registry is the name → connector table both connector families
// (kv, ec) share: an empty name means the family's default, and an unknown
// name is an error listing the known ones.
package registry

import (
	"fmt"
	"sort"
	"strings"
)

// Table maps wire names to connectors of one family.
type Table[C any] struct {
	Family  string // "kv" or "ec", for messages
	Default string // the name "" stands for
	Entries map[string]C
}

// Lookup returns the connector of that name.
func (t *Table[C]) Lookup(name string) (C, error) {
	if name == "" {
		name = t.Default
	}
	if c, ok := t.Entries[name]; ok {
		return c, nil
	}
	var zero C
	return zero, fmt.Errorf("unknown %s connector %q (known: %s)", t.Family, name, strings.Join(t.Names(), ", "))
}

// Names lists the known names, sorted.
func (t *Table[C]) Names() []string {
	out := make([]string, 0, len(t.Entries))
	for n := range t.Entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
