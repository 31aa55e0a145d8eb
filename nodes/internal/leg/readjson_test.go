package leg_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

func reply(body []byte) *http.Response {
	return &http.Response{
		StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
	}
}

// renderReply is a chat render reply carrying n token ids (~4 bytes each).
func renderReply(n int) []byte {
	b := []byte(`{"request_id":"chatcmpl-1","token_ids":[`)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(i*7919%151000), 10)
	}
	return append(b, `],"features":null}`...)
}

// ACCEPTANCE 198: ReadJSON accepts one JSON value and nothing else.
func TestReadJSONValidates(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"a":[1,2.5e3,-0,"x\u00e9",true,false,null]}`, true},
		{" \n[1]\t", true},
		{`"s"`, true},
		{`{"a":1}{"b":2}`, false},
		{`{"a":1,}`, false},
		{`{"a":01}`, false},
		{`{"a":"` + "\x01" + `"}`, false},
		{`{"a":"\x"}`, false},
		{`[1,2`, false},
		{`nul`, false},
		{strings.Repeat("[", 100) + strings.Repeat("]", 100), true},
		{"   ", false},
	} {
		b, e := leg.ReadJSON(nil, reply([]byte(tc.body)), 1<<20)
		if tc.ok != (e == nil) {
			t.Errorf("ReadJSON(%q) = %q, %v; want ok=%v", tc.body, b, e, tc.ok)
			continue
		}
		if e != nil && (e.Kind != engine.KindBadGateway || !strings.Contains(e.Msg, "unparseable body (HTTP 200)")) {
			t.Errorf("ReadJSON(%q): %v", tc.body, e)
		}
		if e == nil && string(b) != tc.body {
			t.Errorf("ReadJSON(%q) returned %q", tc.body, b)
		}
	}
}

// A render reply for a 200 KB prompt: ~50k ids.
func BenchmarkReadJSON(b *testing.B) {
	body := renderReply(50000)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, e := leg.ReadJSON(nil, reply(body), 64<<20); e != nil {
			b.Fatal(e)
		}
	}
}
