package upstream

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseModels(t *testing.T) {
	for _, tc := range []struct {
		name, body, ids string
		err             bool
	}{
		{"vLLM", `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"vllm","root":"m","max_model_len":8}]}`, "m", false},
		{"entries filtered", `{"data":[{"id":3},{"id":""},{"id":"a\tb"},{"id":"ok"},7,null]}`, "ok", false},
		{"empty list", `{"data":[]}`, "", false},
		{"no data", `{}`, "", true},
		{"data not an array", `{"data":{}}`, "", true},
		{"not JSON", `nope`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := parseModels([]byte(tc.body))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v", err)
			}
			var ids []string
			for _, m := range ms {
				ids = append(ids, m.ID)
			}
			if strings.Join(ids, ",") != tc.ids {
				t.Fatalf("ids %v", ids)
			}
		})
	}
}

// FuzzParseModels: whatever a worker sends, parseModels never panics and
// keeps only bounded, printable ids and owners.
func FuzzParseModels(f *testing.F) {
	f.Add([]byte(`{"data":[{"id":"m","created":1,"owned_by":"o"}]}`))
	f.Add([]byte(`{"data":[{"id":"\u0000"},{"id":1e400}]}`))
	f.Add([]byte(`{"data":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := parseModels(b)
		if err != nil {
			return
		}
		if len(ms) > maxModels {
			t.Fatalf("%d models", len(ms))
		}
		for _, m := range ms {
			for _, s := range []string{m.ID, m.OwnedBy} {
				if s == "" || len(s) > maxModelID || !utf8.ValidString(s) || strings.ContainsAny(s, "\x00\n\r\t") {
					t.Fatalf("kept %q", s)
				}
			}
			if m.Object != "model" || m.Created < 0 {
				t.Fatalf("entry %+v", m)
			}
		}
	})
}
