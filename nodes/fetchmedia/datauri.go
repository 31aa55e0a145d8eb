package fetchmedia

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// parseDataURI splits data:<type>[;params];base64,<payload>.
// The media type comes back trimmed and lowercased; payload aliases uri.
func parseDataURI(uri []byte) (mediaType string, payload []byte, err error) {
	if len(uri) < 5 || !strings.EqualFold(string(uri[:5]), "data:") {
		return "", nil, errors.New("data URI must start with data:")
	}
	comma := bytes.IndexByte(uri, ',')
	if comma < 0 {
		return "", nil, errors.New("data URI has no comma")
	}
	header := uri[5:comma]
	semi := bytes.IndexByte(header, ';')
	if semi < 0 {
		return "", nil, errors.New("data URI is not base64 (no ;base64 before the comma)")
	}
	last := header[bytes.LastIndexByte(header, ';')+1:]
	if !strings.EqualFold(strings.TrimSpace(string(last)), "base64") {
		return "", nil, errors.New("data URI is not base64 (no ;base64 before the comma)")
	}
	mediaType = strings.ToLower(strings.TrimSpace(string(header[:semi])))
	if mediaType == "" {
		return "", nil, errors.New("data URI has an empty media type")
	}
	return mediaType, uri[comma+1:], nil
}

// chunk is a multiple of 4 (tests build boundary cases with it).
const chunk = 4096

// b64 marks the standard base64 alphabet (no padding, no line breaks).
var b64 = func() (t [256]bool) {
	for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" {
		t[c] = true
	}
	return
}()

// checkBase64 verifies that p is standard base64 (padding only at the end,
// zero pad bits, no line breaks or other characters) and returns its decoded
// size; more than limit decoded bytes is an error, detected before the
// scan. Nothing is decoded or allocated: a table lookup per byte validates
// every full quantum, and only the last quantum is decoded (strictly) to
// judge its padding.
func checkBase64(p []byte, limit int64) (int64, error) {
	if len(p)%4 != 0 {
		return 0, errors.New("payload is not valid base64 (length not a multiple of 4)")
	}
	n := int64(base64.StdEncoding.DecodedLen(len(p)))
	if len(p) > 0 && p[len(p)-1] == '=' {
		n--
		if p[len(p)-2] == '=' {
			n--
		}
	}
	if n > limit {
		return n, &tooLargeError{Size: n, Limit: limit}
	}
	if len(p) == 0 {
		return 0, nil
	}
	body := p[:len(p)-4]
	for _, c := range body {
		if !b64[c] {
			return 0, errors.New("payload is not valid base64")
		}
	}
	// The decoder skips \r and \n even in strict mode, so the last quantum's
	// alphabet is checked here too ("\n\n\n\n" once passed as 3 bytes;
	// found by FuzzCheckBase64, kept as a seed).
	last := p[len(p)-4:]
	for _, c := range last {
		if !b64[c] && c != '=' {
			return 0, errors.New("payload is not valid base64")
		}
	}
	var buf [3]byte
	if _, err := base64.StdEncoding.Strict().Decode(buf[:], last); err != nil {
		return 0, errors.New("payload is not valid base64")
	}
	return n, nil
}

// tooLargeError is media over its modality's max_download_size.
type tooLargeError struct {
	Size, Limit int64 // Size -1: unknown (the read stopped at the cap)
}

func (e *tooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("media is larger than the %s limit", mib(e.Limit))
	}
	return fmt.Sprintf("media is %d bytes, over the %s limit", e.Size, mib(e.Limit))
}

func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d-byte", n)
}
