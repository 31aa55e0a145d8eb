package upstream

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Limits of PROTOCOL 12.
const (
	ErrorBodyLimit = 8 << 10 // bytes of an upstream error body read, for the logs
	ErrorMsgLimit  = 512     // bytes of a relayed upstream error message
)

// ErrBodyTooLarge: a 2xx body exceeded ReadBody's limit.
var ErrBodyTooLarge = errors.New("upstream body exceeds the limit")

// decoded returns the body as sent before content coding. Go's transport
// already decoded (and dropped Content-Encoding) when it negotiated gzip
// itself; a gzip body left here came from a relay leg (decode's error
// bodies) or a server that compressed unasked.
func decoded(resp *http.Response) (io.Reader, error) {
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
		return resp.Body, nil
	case "gzip", "x-gzip":
		return gzip.NewReader(resp.Body)
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %q", ce)
	}
}

func readBody(resp *http.Response, limit int64) ([]byte, error) {
	defer resp.Body.Close()
	r, err := decoded(resp)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if n := resp.ContentLength; n > 0 && (limit <= 0 || n <= limit) && r == resp.Body {
		buf.Grow(int(n) + 1) // +1: the final Read that sees EOF
	}
	if limit > 0 {
		r = io.LimitReader(r, limit+1)
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	if limit > 0 && int64(buf.Len()) > limit {
		return nil, fmt.Errorf("%w (%d bytes)", ErrBodyTooLarge, limit)
	}
	return buf.Bytes(), nil
}

// errorInfo reads at most ErrorBodyLimit bytes of (decoded) body for the
// logs and extracts the OpenAI-style message from them, even when the body
// was cut by the limit (a 20 KiB message still yields its first 512 bytes,
// ACCEPTANCE 197).
func errorInfo(resp *http.Response) (msg string, logBody []byte) {
	defer resp.Body.Close()
	r, err := decoded(resp)
	if err != nil {
		// Undecodable: log the raw start, relay nothing.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, ErrorBodyLimit))
		return "", b
	}
	b, _ := io.ReadAll(io.LimitReader(r, ErrorBodyLimit)) // a read error keeps what came
	return openAIMessage(b, ErrorMsgLimit), b
}
