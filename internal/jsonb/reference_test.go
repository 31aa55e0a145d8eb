package jsonb

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// referenceDuplicate is the independent judge for the fuzz targets and the
// table tests: encoding/json's token stream decodes every name (escapes,
// invalid UTF-8 as U+FFFD) and a set per open object finds repeats. It
// returns nil for a document without duplicates (or an invalid one).
func referenceDuplicate(doc []byte) error {
	d := json.NewDecoder(bytes.NewReader(doc))
	type frame struct {
		obj   bool
		names map[string]bool
		key   bool // next token in an object is a key
	}
	var st []frame
	for {
		tok, err := d.Token()
		if err != nil {
			return nil
		}
		if n := len(st); n > 0 && st[n-1].obj && st[n-1].key {
			if s, ok := tok.(string); ok {
				if st[n-1].names[s] {
					return fmt.Errorf("duplicate %q", s)
				}
				st[n-1].names[s] = true
				st[n-1].key = false
				continue
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				st = append(st, frame{obj: true, names: map[string]bool{}, key: true})
				continue
			case '[':
				st = append(st, frame{})
				continue
			default:
				st = st[:len(st)-1]
			}
		}
		if n := len(st); n > 0 && st[n-1].obj {
			st[n-1].key = true
		}
	}
}
