package upstream

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Limits on what is kept of an upstream error body (docs/errors.md).
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

// readBody reads a whole body with a memory bound of about limit per reply
// (issue 10: bytes.Buffer doubling took ~3× the cap for an over-cap reply):
//   - a declared Content-Length over the limit fails before reading a byte;
//   - a declared length within it is read into one exact allocation;
//   - an unknown length (chunked, or decoded gzip) is read into chunks whose
//     total capacity never exceeds limit+1, so an over-cap body costs at most
//     ~limit; a body within the cap that needed more than one chunk is then
//     joined once (≤ 2× its own size, never more than ~2× the cap).
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	defer resp.Body.Close()
	r, err := decoded(resp)
	if err != nil {
		return nil, err
	}
	if n := resp.ContentLength; n >= 0 && limit > 0 && r == resp.Body {
		if n > limit {
			return nil, fmt.Errorf("%w (%d bytes; Content-Length %d)", ErrBodyTooLarge, limit, n)
		}
		return readExact(r, n)
	}
	return readChunks(r, limit)
}

// readExact reads a body of declared length n: one allocation. The
// transport already stops at n and reports a short body as
// io.ErrUnexpectedEOF.
func readExact(r io.Reader, n int64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// Chunk sizes of readChunks: small replies fit the first chunk; chunks
// double up to maxChunk.
const (
	firstChunk = 8 << 10
	maxChunk   = 4 << 20
)

// readChunks reads a body of unknown length with at most limit+1 bytes of
// chunk capacity (limit ≤ 0: no bound). One chunk is returned as is.
func readChunks(r io.Reader, limit int64) ([]byte, error) {
	var chunks [][]byte
	var total, capLeft int64 = 0, limit + 1
	size := int64(firstChunk)
	for {
		c := size
		if limit > 0 {
			if capLeft == 0 {
				return nil, fmt.Errorf("%w (%d bytes)", ErrBodyTooLarge, limit)
			}
			c = min(c, capLeft)
			capLeft -= c
		}
		buf := make([]byte, c)
		n, err := fill(r, buf)
		total += int64(n)
		chunks = append(chunks, buf[:n])
		if err == io.EOF {
			break // the body ended inside this chunk
		}
		if err != nil {
			return nil, err
		}
		size = min(size*2, maxChunk)
	}
	if limit > 0 && total > limit {
		return nil, fmt.Errorf("%w (%d bytes)", ErrBodyTooLarge, limit)
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, c...)
	}
	return out, nil
}

// errorInfo reads at most ErrorBodyLimit bytes of (decoded) body for the
// logs and extracts the OpenAI-style message from them, even when the body
// was cut by the limit (a 20 KiB message still yields its first 512 bytes).
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

// fill reads until buf is full (nil error) or r fails: io.EOF is the clean
// end of the body; any other error (io.ErrUnexpectedEOF from a cut
// connection included) is returned as is, unlike io.ReadFull, which would
// make a truncated body look complete.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
