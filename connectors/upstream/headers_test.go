package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestForwardHeaders(t *testing.T) {
	tests := []struct {
		name  string
		src   http.Header
		relay bool
		want  http.Header
	}{
		{
			// ACCEPTANCE 14
			name: "multi-valued and credentials pass whole, in order",
			src: http.Header{
				"X-Custom":        {"a", "b"},
				"Authorization":   {"Bearer t"},
				"Cookie":          {"s=1", "u=2"},
				"Accept":          {"application/json"},
				"User-Agent":      {"ua"},
				"X-Forwarded-For": {"10.0.0.1"},
			},
			want: http.Header{
				"X-Custom":        {"a", "b"},
				"Authorization":   {"Bearer t"},
				"Cookie":          {"s=1", "u=2"},
				"Accept":          {"application/json"},
				"User-Agent":      {"ua"},
				"X-Forwarded-For": {"10.0.0.1"},
			},
		},
		{
			// ACCEPTANCE 15
			name: "hop-by-hop, Connection-named and celflow-owned headers are dropped",
			src: http.Header{
				"Connection":          {"X-Hop, keep-alive", "X-Hop2"},
				"X-Hop":               {"secret"},
				"X-Hop2":              {"secret"},
				"Keep-Alive":          {"timeout=5"},
				"Te":                  {"trailers"},
				"Trailer":             {"X-T"},
				"Transfer-Encoding":   {"chunked"},
				"Upgrade":             {"websocket"},
				"Proxy-Authorization": {"Basic x"},
				"Proxy-Authenticate":  {"Basic"},
				"Proxy-Connection":    {"keep-alive"},
				"Epp-Profile":         {"prefill"},
				"Prefer":              {"if-available"},
				"Content-Type":        {"text/plain"},
				"Content-Length":      {"12"},
				"Host":                {"evil"},
				"X-Request-Id":        {"client-id"},
				"X-Kept":              {"yes"},
			},
			want: http.Header{"X-Kept": {"yes"}},
		},
		{
			name: "headers naming a phase or an endpoint are celflow's, whatever their case",
			src: http.Header{
				"x-gateway-destination-endpoint":        {"10.0.0.66:8000"},
				"X-Gateway-Destination-Endpoint-Subset": {"10.0.0.66:8000"},
				"X-Gateway-Destination-Endpoint-Served": {"10.0.0.66:8000"},
				"X-Prefiller-Host-Port":                 {"evil:8000"},
				"x-encoder-hosts-ports":                 {"evil:8001,evil:8002"},
				"X-Llm-D-Inference-Objective":           {"premium"},
				"X-Llm-D-Inference-Fairness-Id":         {"victim"},
				"EPP-PROFILE":                           {"decode"},
				"prefer":                                {"if-available"},
				"X-Kept":                                {"yes"},
			},
			want: http.Header{"X-Kept": {"yes"}},
		},
		{
			name: "accept-encoding dropped on legs celflow reads",
			src:  http.Header{"Accept-Encoding": {"gzip, br"}},
			want: http.Header{},
		},
		{
			// ACCEPTANCE 17 (decode side)
			name:  "accept-encoding kept on relayed legs",
			src:   http.Header{"Accept-Encoding": {"gzip, br"}},
			relay: true,
			want:  http.Header{"Accept-Encoding": {"gzip, br"}},
		},
		{
			name: "trace context forwarded unchanged",
			src:  http.Header{"Traceparent": {"00-abc-def-01"}, "Tracestate": {"k=v"}},
			want: http.Header{"Traceparent": {"00-abc-def-01"}, "Tracestate": {"k=v"}},
		},
		{
			name: "non-canonical keys are canonicalised, then filtered",
			src:  http.Header{"x-custom": {"a"}, "epp-profile": {"decode"}, "connection": {"x-custom"}},
			want: http.Header{},
		},
		{
			name: "non-canonical keys pass canonicalised",
			src:  http.Header{"x-custom": {"a"}},
			want: http.Header{"X-Custom": {"a"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := http.Header{}
			ForwardHeaders(dst, tt.src, tt.relay)
			if !reflect.DeepEqual(dst, tt.want) {
				t.Errorf("got %v\nwant %v", dst, tt.want)
			}
		})
	}
}

// dst shares src's value slices; an append through dst must not show in src.
func TestForwardHeadersNoAliasingWrites(t *testing.T) {
	vals := make([]string, 1, 4)
	vals[0] = "a"
	src := http.Header{"X-Custom": vals}
	dst := http.Header{}
	ForwardHeaders(dst, src, false)
	dst.Add("X-Custom", "b")
	other := http.Header{}
	ForwardHeaders(other, src, false)
	other.Add("X-Custom", "c")
	if got := dst["X-Custom"]; !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("dst = %v", got)
	}
	if got := src["X-Custom"]; !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("src = %v", got)
	}
}

// ACCEPTANCE 181: relayed headers lose hop-by-hop ones.
func TestCopyReplyHeaders(t *testing.T) {
	src := http.Header{
		"Content-Type":      {"text/event-stream"},
		"Content-Encoding":  {"gzip"},
		"Connection":        {"keep-alive, X-Hop"},
		"Keep-Alive":        {"timeout=5"},
		"X-Hop":             {"x"},
		"Transfer-Encoding": {"chunked"},
		"X-Request-Id":      {"upstream"},
		"Set-Cookie":        {"a=1", "b=2"},
	}
	dst := http.Header{"Content-Type": {"application/json"}}
	copyReplyHeaders(dst, src)
	want := http.Header{
		"Content-Type":     {"text/event-stream"},
		"Content-Encoding": {"gzip"},
		"Set-Cookie":       {"a=1", "b=2"},
	}
	if !reflect.DeepEqual(dst, want) {
		t.Errorf("got %v\nwant %v", dst, want)
	}
}

func TestNamedIn(t *testing.T) {
	tests := []struct {
		conn []string
		key  string
		want bool
	}{
		{[]string{"close"}, "X-A", false},
		{[]string{"x-a"}, "X-A", true},
		{[]string{" keep-alive ,  X-A "}, "X-A", true},
		{[]string{"keep-alive", "X-B,X-A"}, "X-A", true},
		{[]string{",,"}, "X-A", false},
		{nil, "X-A", false},
	}
	for _, tt := range tests {
		if got := namedIn(tt.conn, tt.key); got != tt.want {
			t.Errorf("namedIn(%q, %q) = %v", tt.conn, tt.key, got)
		}
	}
}

// ACCEPTANCE 15: every built-in owned name is dropped (the list and the
// switch agree).
func TestOwnedHeadersAllDropped(t *testing.T) {
	for _, name := range OwnedHeaders {
		dst := http.Header{}
		ForwardHeaders(dst, http.Header{name: {"x"}}, true)
		if len(dst) != 0 {
			t.Errorf("%s forwarded", name)
		}
	}
}

// trust.owned_headers: names an operator adds are dropped on real legs too,
// in any spelling, and celflow's own stamps still go out.
func TestOperatorOwnedHeaders(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c, err := New(Config{Gateway: srv.URL, OwnedHeaders: []string{"x-tenant-route", " X-Shard "}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdle()
	leg := &Leg{Role: RoleDecode, Path: "/v1/chat/completions", Body: strings.NewReader("{}"), Prefer: true, ReqID: "r1",
		Header: http.Header{"X-Tenant-Route": {"evil"}, "x-shard": {"7"}, "Epp-Profile": {"prefill"}, "X-Kept": {"k"}}}
	resp, err := c.Send(context.Background(), srv.URL, leg)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := rec.header
	if h.Get("X-Tenant-Route") != "" || h.Get("X-Shard") != "" || h.Get("X-Kept") != "k" {
		t.Errorf("leg headers %v", h)
	}
	if h.Get("Epp-Profile") != "decode" || h.Get("Prefer") != "if-available" || h.Get("X-Request-Id") != "r1" {
		t.Errorf("celflow's stamps missing: %v", h)
	}
}
