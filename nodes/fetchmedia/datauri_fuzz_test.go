package fetchmedia

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// FuzzParseDataURI: no panic; an accepted URI yields a lower-case, trimmed,
// non-empty media type and a payload that is the bytes after the first
// comma, aliasing the input.
func FuzzParseDataURI(f *testing.F) {
	for _, s := range []string{"data:image/png;base64,iVBO", "DATA:Image/PNG ; charset=x ;BASE64,AA==", "data:;base64,AA", "data:image/png,AAAA",
		"data:image/png;base64", "data:", "data:a;b;base64 ,x", "data:\x00;base64,"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, uri []byte) {
		typ, payload, err := parseDataURI(uri)
		if err != nil {
			return
		}
		comma := bytes.IndexByte(uri, ',')
		if typ == "" || typ != strings.ToLower(strings.TrimSpace(typ)) || comma < 0 || len(payload) != len(uri)-comma-1 ||
			(len(payload) > 0 && &payload[0] != &uri[comma+1]) {
			t.Fatalf("parseDataURI(%q) = %q, %q", uri, typ, payload)
		}
	})
}

// FuzzCheckBase64 holds checkBase64 to the standard library's strict
// decoder (which also skips \r and \n; checkBase64 refuses them) and to the
// limit, checked before any scan.
func FuzzCheckBase64(f *testing.F) {
	for _, s := range []string{"", "AAAA", "AA==", "AAA=", "A===", "AB==", "AAAA\nAAAA", "QUJD" + strings.Repeat("A", 4096), "====", "AA=A", "-_AA"} {
		f.Add([]byte(s), int64(1<<20))
	}
	f.Add([]byte("AAAAAAAA"), int64(5))
	f.Fuzz(func(t *testing.T, p []byte, limit int64) {
		n, err := checkBase64(p, limit)
		dec, derr := base64.StdEncoding.Strict().DecodeString(string(p))
		refOK := derr == nil && bytes.IndexAny(p, "\r\n") < 0
		var big *tooLargeError
		switch {
		case errors.As(err, &big):
			if refOK && int64(len(dec)) <= limit {
				t.Fatalf("%q (%d bytes) refused as over %d", p, len(dec), limit)
			}
		case err != nil:
			if refOK {
				t.Fatalf("valid base64 %q refused: %v", p, err)
			}
		default:
			if !refOK || n != int64(len(dec)) || n > limit {
				t.Fatalf("checkBase64(%q) = %d, reference %d bytes ok=%v", p, n, len(dec), refOK)
			}
		}
	})
}

// Found by FuzzCheckBase64: encoding/base64 skips \r and \n even in strict
// mode, so a last quantum of line breaks was "valid" (3 bytes). Line breaks
// anywhere are refused now (seeds: testdata/fuzz/FuzzCheckBase64/*newline*, crlf-*).
func TestCheckBase64LineBreaks(t *testing.T) {
	for _, p := range []string{"\n\n\n\n", "AAAA\n\n\n\n", "AA\r\nA", "AAA\n", "\r\r\r\r"} {
		if n, err := checkBase64([]byte(p), 1<<20); err == nil {
			t.Errorf("%q accepted as %d bytes", p, n)
		}
	}
}
