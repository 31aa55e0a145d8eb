package upstream

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// chunkReader returns body in the pieces cuts describes (each byte a piece
// length, 0 meaning an empty read), then the rest, then EOF.
type chunkReader struct {
	body, cuts []byte
	reads      int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.body) == 0 {
		return 0, io.EOF
	}
	n := len(r.body)
	if len(r.cuts) > 0 {
		n = min(int(r.cuts[0]), n)
		r.cuts = r.cuts[1:]
	}
	n = copy(p, r.body[:n])
	r.body = r.body[n:]
	if n > 0 {
		r.reads++
	}
	return n, nil
}

func (r *chunkReader) Close() error { return nil }

// flushRecorder counts flushes and the bytes seen at each.
type flushRecorder struct {
	*httptest.ResponseRecorder
	flushes int
}

func (f *flushRecorder) Flush() { f.flushes++ }

// FuzzRelaySSE: whatever the upstream sends and however its reads are cut,
// the relay passes the bytes through exactly (SSE framing is never
// re-cut, merged or altered), flushes after every read that returned data
// (events are not coalesced), and sees text/event-stream as mime does.
func FuzzRelaySSE(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"), []byte{3, 0, 7}, "text/event-stream")
	f.Add([]byte(": comment\r\nevent: x\r\ndata: y\r\n\r\n"), []byte{1, 1, 1}, "Text/Event-Stream; charset=utf-8")
	f.Add([]byte("data: partial"), []byte{}, "application/json")
	f.Add([]byte{}, []byte{0}, " text/event-stream ;")
	f.Fuzz(func(t *testing.T, body, cuts []byte, ct string) {
		rd := &chunkReader{body: body, cuts: cuts}
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {ct}}, Body: rd}
		w := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
		n, err := RelayWith(w, resp, RelayOptions{ReqID: "r"})
		if err != nil || n != int64(len(body)) || !bytes.Equal(w.Body.Bytes(), body) {
			t.Fatalf("relayed %d bytes (%v), want the %d sent exactly", n, err, len(body))
		}
		stream := IsEventStream(ct)
		if w.flushes < rd.reads {
			t.Fatalf("%d flushes for %d reads", w.flushes, rd.reads)
		}
		if mt, _, err := mime.ParseMediaType(ct); err == nil && strings.TrimSpace(ct) == ct {
			if (mt == "text/event-stream") != stream {
				t.Fatalf("IsEventStream(%q) = %v, mime says %q", ct, stream, mt)
			}
		}
	})
}
