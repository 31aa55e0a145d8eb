package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// A leg's request is the one http.NewRequest(base+path) builds, whether the
// base was parsed once (template) or the URL is parsed per leg (fallback).
func TestRequestURLMatchesParse(t *testing.T) {
	bases := []string{
		"http://127.0.0.1:8000", "http://127.0.0.1:8000/", "https://gw.example:443/prefix",
		"http://[::1]:9000", "http://host:", "http://user:pw@h:1/a", "http://h/a%20b", "http://h/a%2Fb",
		"http://h/p?x=1", "http://h#frag", "http://h/ä", "HTTP://H:1", "h:1", "", "http://h/p;q",
	}
	paths := []string{
		"/v1/chat/completions", "", "/v1/completions/render", "/a-b_c.d~e/", "//x", "v1",
		"/v1?x=1", "/a%20b", "/a#b", "/ä", "/a b", "/a:b",
	}
	ctx := context.Background()
	bc := newBaseCache(bases[:4]...) // some fixed, the rest learned
	for _, base := range bases {
		for _, path := range paths {
			for _, body := range []func() io.Reader{
				func() io.Reader { return strings.NewReader("abc") },
				func() io.Reader { return bytes.NewReader(nil) },
				func() io.Reader { return io.MultiReader(strings.NewReader("x")) },
			} {
				want, werr := http.NewRequestWithContext(ctx, http.MethodPost, base+path, body())
				got, gerr := bc.newPost(ctx, base, path, body())
				if (werr == nil) != (gerr == nil) {
					t.Fatalf("%q + %q: err %v, want %v", base, path, gerr, werr)
				}
				if werr != nil {
					continue
				}
				if !reflect.DeepEqual(got.URL, want.URL) || got.Host != want.Host || got.URL.String() != want.URL.String() {
					t.Errorf("%q + %q: URL %#v host %q, want %#v host %q", base, path, got.URL, got.Host, want.URL, want.Host)
				}
				if got.ContentLength != want.ContentLength || (got.GetBody == nil) != (want.GetBody == nil) ||
					(got.Body == http.NoBody) != (want.Body == http.NoBody) || got.Method != want.Method || got.Context() != ctx {
					t.Errorf("%q + %q: body fields differ", base, path)
				}
			}
		}
	}
	// The template path is the one taken for the usual bases and paths.
	if b := bc.get("http://127.0.0.1:8000"); !b.ok || !plainPath("/v1/chat/completions") {
		t.Error("a plain base and path do not use the template")
	}
	for _, base := range []string{"http://h/p?x=1", "http://h/a%2Fb", "http://h#frag", "h:1", ""} {
		if bc.get(base).ok {
			t.Errorf("%q used as a template", base)
		}
	}
}

// A template is never modified by the legs built from it.
func TestRequestURLTemplateUntouched(t *testing.T) {
	bc := newBaseCache("http://h:1/base")
	r1, _ := bc.newPost(context.Background(), "http://h:1/base", "/one", nil)
	r1.URL.Path += "/mutated"
	r2, _ := bc.newPost(context.Background(), "http://h:1/base", "/two", nil)
	if r2.URL.String() != "http://h:1/base/two" || bc.get("http://h:1/base").u.Path != "/base" {
		t.Fatalf("got %s, template %q", r2.URL, bc.get("http://h:1/base").u.Path)
	}
}

// Bases learned at run time are bounded.
func TestLearnedBasesBounded(t *testing.T) {
	bc := newBaseCache()
	for i := range maxLearnedBases + 10 {
		base := "http://h" + strings.Repeat("x", i) + ":1"
		if r, err := bc.newPost(context.Background(), base, "/p", nil); err != nil || r.URL.String() != base+"/p" {
			t.Fatalf("%s: %v %v", base, r, err)
		}
	}
	n := 0
	bc.learned.Range(func(any, any) bool { n++; return true })
	if n != maxLearnedBases {
		t.Fatalf("%d bases learned, bound %d", n, maxLearnedBases)
	}
}

// Building one leg's request (URL and headers), the part of Send that is
// celflow's own rather than net/http's.
func BenchmarkNewRequest(b *testing.B) {
	c, err := New(Config{Gateway: "http://127.0.0.1:8000"})
	if err != nil {
		b.Fatal(err)
	}
	hdr := http.Header{"Authorization": {"Bearer x"}, "Content-Type": {"application/json"}, "User-Agent": {"openai-python"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l := &Leg{Role: RolePrefill, Path: "/v1/chat/completions", Body: strings.NewReader("{}"), Length: 2, Header: hdr, ReqID: "r"}
		if _, err := c.impl.newRequest(ctx, "http://127.0.0.1:8000", l); err != nil {
			b.Fatal(err)
		}
	}
}
