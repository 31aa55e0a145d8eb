package upstream

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
)

// Request URLs without url.Parse per leg. A leg's URL is a base (the
// gateway, a pool endpoint, the render service, a render node's address)
// plus a path. Bases are few and fixed by the config, so each is parsed once
// into a template request URL; a leg copies the template and appends its
// path. The result is field for field what http.NewRequest(base+path) gives
// (TestRequestURLMatchesParse): the shortcut is taken only for an http(s)
// template with a host, no query or fragment and a canonically escaped path
// (RawPath empty), and for a leg path made of unreserved characters and '/';
// for those, concatenating the strings and appending to the parsed Path are
// the same thing.

// baseURL is a parsed base: the URL and Host http.NewRequest sets for it.
type baseURL struct {
	u    url.URL
	host string
	ok   bool // usable as a template; false: parse base+path per leg
}

// maxLearnedBases bounds the bases learned at run time (render node
// addresses are not known to the client when it is built). They come from
// the config, so the bound is never reached in practice; past it, legs
// parse their URL as before.
const maxLearnedBases = 256

// baseCache holds the bases known at construction (read-only map) and the
// ones learned from Send calls.
type baseCache struct {
	fixed   map[string]*baseURL
	learned sync.Map // string → *baseURL
	n       atomic.Int32
}

func newBaseCache(bases ...string) *baseCache {
	bc := &baseCache{fixed: make(map[string]*baseURL, len(bases))}
	for _, b := range bases {
		if b != "" {
			bc.fixed[b] = parseBase(b)
		}
	}
	return bc
}

func parseBase(base string) *baseURL {
	r, err := http.NewRequest(http.MethodPost, base, nil)
	if err != nil {
		return &baseURL{}
	}
	u := r.URL
	ok := (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Opaque == "" &&
		u.RawPath == "" && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && u.RawFragment == ""
	return &baseURL{u: *u, host: r.Host, ok: ok}
}

func (bc *baseCache) get(base string) *baseURL {
	if b, ok := bc.fixed[base]; ok {
		return b
	}
	if v, ok := bc.learned.Load(base); ok {
		return v.(*baseURL)
	}
	b := parseBase(base)
	if bc.n.Add(1) <= maxLearnedBases {
		bc.learned.Store(base, b)
	}
	return b
}

// plainPath: every byte is unreserved (RFC 3986) or '/', and the path is
// empty or absolute, so it appends to a parsed path unchanged.
func plainPath(p string) bool {
	if p != "" && p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// newPost is http.NewRequestWithContext(ctx, POST, base+path, body) without
// parsing the URL when base has a template. The request is made by the
// standard constructor over an empty URL (so body, ContentLength and
// GetBody get its exact treatment) and then pointed at the template.
func (bc *baseCache) newPost(ctx context.Context, base, path string, body io.Reader) (*http.Request, error) {
	b := bc.get(base)
	if !b.ok || !plainPath(path) {
		return http.NewRequestWithContext(ctx, http.MethodPost, base+path, body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "", body)
	if err != nil {
		return nil, err
	}
	*req.URL = b.u
	req.URL.Path = b.u.Path + path
	req.Host = b.host
	return req, nil
}
