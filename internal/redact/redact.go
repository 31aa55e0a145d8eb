// Package redact shapes client headers and bodies for debug logs
// (docs/operations.md, Logs): secrets are masked, long values are cut, and a body's
// structure is kept while its bulk (data URIs, URLs, long strings, long
// arrays, deep nesting) is summarised. It runs only when debug logging is
// enabled, so it favours clarity over speed; the rules are exact because
// tests pin them.
package redact

import (
	"net/http"
	"strings"
	"unicode/utf8"
)

// The redaction limits.
const (
	Redacted       = "[REDACTED]"
	MaxHeaderChars = 256 // header values are cut at this many characters
	MaxStringChars = 50  // longer body strings are summarised
	MaxArrayItems  = 10  // arrays keep this many elements, then "... +N more"
	MaxDepth       = 32  // a container nested deeper than this becomes "[truncated]"
	MaxRawChars    = 200 // a non-JSON body is cut at this many characters
)

// sensitive lists the headers whose values never reach a log, in canonical form.
var sensitive = map[string]bool{
	"Authorization":       true,
	"Proxy-Authorization": true,
	"Cookie":              true,
	"Set-Cookie":          true,
	"X-Api-Key":           true,
	"X-Auth-Token":        true,
}

// IsSensitive reports whether a header's value must be masked (any case).
func IsSensitive(name string) bool { return sensitive[http.CanonicalHeaderKey(name)] }

// Header returns a copy of h fit for a log: sensitive values (any case of
// the name) become [REDACTED], other values are cut at MaxHeaderChars
// characters, and empty values keep their key. h is not modified.
func Header(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		red := IsSensitive(k)
		cp := make([]string, len(vs))
		for i, v := range vs {
			switch {
			case red:
				cp[i] = Redacted
			default:
				cp[i] = cutChars(v, MaxHeaderChars)
			}
		}
		out[k] = cp
	}
	return out
}

// String summarises one body string: a value longer than MaxStringChars
// characters becomes [base64] for a data: URI, [url] for an http(s) URL,
// and otherwise its first MaxStringChars characters followed by "...".
func String(s string) string {
	if utf8.RuneCountInString(s) <= MaxStringChars {
		return s
	}
	switch {
	case strings.HasPrefix(s, "data:"):
		return "[base64]"
	case strings.HasPrefix(s, "http://"), strings.HasPrefix(s, "https://"):
		return "[url]"
	}
	return cutChars(s, MaxStringChars) + "..."
}

// cutChars keeps the first n characters (runes) of s.
func cutChars(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
