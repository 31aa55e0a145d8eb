package redact

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// ACCEPTANCE 18: header rules.
func TestHeader(t *testing.T) {
	long := strings.Repeat("é", 300) // 300 characters, 600 bytes
	in := http.Header{
		"Authorization":       {"Bearer sk-secret"},
		"Proxy-Authorization": {"Basic abc"},
		"Cookie":              {"a=1", "b=2"},
		"Set-Cookie":          {"s=1"},
		"X-Api-Key":           {"k"},
		"X-Auth-Token":        {"t"},
		"x-api-key":           {"lower-case key, not canonicalised"},
		"X-AUTH-TOKEN":        {"upper"},
		"X-Empty":             {""},
		"X-Long":              {long},
		"X-Custom":            {"a", "b"},
	}
	want := http.Header{
		"Authorization":       {Redacted},
		"Proxy-Authorization": {Redacted},
		"Cookie":              {Redacted, Redacted},
		"Set-Cookie":          {Redacted},
		"X-Api-Key":           {Redacted},
		"X-Auth-Token":        {Redacted},
		"x-api-key":           {Redacted},
		"X-AUTH-TOKEN":        {Redacted},
		"X-Empty":             {""},
		"X-Long":              {strings.Repeat("é", 256)},
		"X-Custom":            {"a", "b"},
	}
	got := Header(in)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Header:\n got %v\nwant %v", got, want)
	}
	if in.Get("Authorization") != "Bearer sk-secret" {
		t.Fatal("Header modified its input")
	}
}

// ACCEPTANCE 18: string rules.
func TestString(t *testing.T) {
	s50 := strings.Repeat("x", 50)
	tests := []struct{ in, want string }{
		{"short", "short"},
		{s50, s50}, // exactly 50 is kept
		{s50 + "y", s50 + "..."},
		{"data:image/png;base64," + strings.Repeat("A", 40), "[base64]"},
		{"data:short", "data:short"},
		{"http://example.com/" + strings.Repeat("p", 40), "[url]"},
		{"https://example.com/" + strings.Repeat("p", 40), "[url]"},
		{"ftp://example.com/" + strings.Repeat("p", 40), "ftp://example.com/" + strings.Repeat("p", 32) + "..."},
		{strings.Repeat("ü", 51), strings.Repeat("ü", 50) + "..."}, // characters, not bytes
		{strings.Repeat("ü", 50), strings.Repeat("ü", 50)},
	}
	for _, tt := range tests {
		if got := String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func nest(n int, inner string) string {
	return strings.Repeat("[", n) + inner + strings.Repeat("]", n)
}

// ACCEPTANCE 18: body rules.
func TestBody(t *testing.T) {
	long := strings.Repeat("z", 60)
	tests := []struct {
		name, in, want string
	}{
		{"key order and numbers kept",
			`{"b":1,"a":12345678901234567890,"c":1.0e3,"d":true,"e":null}`,
			`{"b":1,"a":12345678901234567890,"c":1.0e3,"d":true,"e":null}`},
		{"strings summarised",
			`{"url":"https://x.io/` + long + `","img":"data:image/png;base64,` + long + `","text":"` + long + `","k":"v"}`,
			`{"url":"[url]","img":"[base64]","text":"` + strings.Repeat("z", 50) + `...","k":"v"}`},
		{"nested messages",
			`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + long + `"}}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"[base64]"}}]}]}`},
		{"array of 10 kept", `[0,1,2,3,4,5,6,7,8,9]`, `[0,1,2,3,4,5,6,7,8,9]`},
		{"array of 13 cut", `{"t":[0,1,2,3,4,5,6,7,8,9,10,11,12]}`, `{"t":[0,1,2,3,4,5,6,7,8,9,"... +3 more"]}`},
		{"skipped elements may be containers", `[0,1,2,3,4,5,6,7,8,9,{"a":[1]},[2]]`, `[0,1,2,3,4,5,6,7,8,9,"... +2 more"]`},
		{"depth 32 kept", nest(32, "1"), nest(32, "1")},
		{"depth 33 truncated", nest(33, "1"), nest(32, `"[truncated]"`)},
		{"deep object truncated", strings.Repeat(`{"a":`, 33) + `1` + strings.Repeat("}", 33),
			strings.Repeat(`{"a":`, 32) + `"[truncated]"` + strings.Repeat("}", 32)},
		{"escapes survive", `{"q":"a\"b\\c\nd<>"}`, `{"q":"a\"b\\c\nd<>"}`},
		{"whitespace dropped", "{ \"a\" : [ 1 , 2 ] }", `{"a":[1,2]}`},
		{"empty containers", `{"a":{},"b":[]}`, `{"a":{},"b":[]}`},
		{"non-JSON cut at 200", strings.Repeat("q", 250), strings.Repeat("q", 200)},
		{"non-JSON short", "not json", "not json"},
		{"truncated JSON is non-JSON", `{"a":` + strings.Repeat("1", 300), `{"a":` + strings.Repeat("1", 195)},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Body([]byte(tt.in)); got != tt.want {
				t.Fatalf("Body:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestIsSensitive(t *testing.T) {
	for _, n := range []string{"authorization", "COOKIE", "set-cookie", "x-API-key", "X-Auth-Token", "proxy-authorization"} {
		if !IsSensitive(n) {
			t.Errorf("IsSensitive(%q) = false", n)
		}
	}
	for _, n := range []string{"X-Custom", "Accept", "X-Request-Id"} {
		if IsSensitive(n) {
			t.Errorf("IsSensitive(%q) = true", n)
		}
	}
}
