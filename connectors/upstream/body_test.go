package upstream

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

func fakeResp(body []byte, header http.Header) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	return &http.Response{
		StatusCode:    400,
		Header:        header,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
	}
}

// errReader fails after its data, as a connection dropped mid-body.
type errReader struct{ r io.Reader }

func (e errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func TestReadBody(t *testing.T) {
	gz := http.Header{"Content-Encoding": {"gzip"}}
	tests := []struct {
		name    string
		resp    *http.Response
		limit   int64
		want    string
		wantErr error // nil: success; errAny: some error
	}{
		{"plain", fakeResp([]byte(`{"a":1}`), nil), 100, `{"a":1}`, nil},
		{"exactly the limit", fakeResp([]byte(`{"a":1}`), nil), 7, `{"a":1}`, nil},
		{"no limit", fakeResp([]byte(`{"a":1}`), nil), 0, `{"a":1}`, nil},
		{"over the limit", fakeResp([]byte(`{"a":1}`), nil), 6, "", ErrBodyTooLarge},
		{"gzip decoded", fakeResp(gzipped(`{"z":2}`), gz), 100, `{"z":2}`, nil},
		{"gzip over the decoded limit", fakeResp(gzipped(strings.Repeat("x", 1000)), gz), 100, "", ErrBodyTooLarge},
		{"unsupported encoding", fakeResp([]byte("x"), http.Header{"Content-Encoding": {"br"}}), 100, "", errAny},
		{"broken gzip", fakeResp([]byte("not gzip"), gz), 100, "", errAny},
		{"truncated body", &http.Response{Header: http.Header{}, Body: io.NopCloser(errReader{strings.NewReader("{")}), ContentLength: 10}, 100, "", errAny},
		// Unknown length (chunked): several chunks are joined; the cap holds
		// to the byte; a cut connection is not a complete body.
		{"unknown length, many chunks", unknownLen(strings.Repeat("y", 100<<10)), 1 << 20, strings.Repeat("y", 100<<10), nil},
		{"unknown length, exactly the limit", unknownLen(strings.Repeat("y", 50000)), 50000, strings.Repeat("y", 50000), nil},
		{"unknown length, one over", unknownLen(strings.Repeat("y", 50001)), 50000, "", ErrBodyTooLarge},
		{"unknown length, no limit", unknownLen(strings.Repeat("y", 70000)), 0, strings.Repeat("y", 70000), nil},
		{"unknown length, empty", unknownLen(""), 100, "", nil},
		{"unknown length, truncated", &http.Response{Header: http.Header{}, Body: io.NopCloser(errReader{strings.NewReader(strings.Repeat("y", 40000))}), ContentLength: -1}, 1 << 20, "", io.ErrUnexpectedEOF},
		{"declared length over the limit", fakeResp([]byte(strings.Repeat("y", 101)), nil), 100, "", ErrBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ReadBody(tt.resp, tt.limit)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("err = %v", err)
			case tt.wantErr == errAny && err == nil, tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			case tt.wantErr == nil && string(b) != tt.want:
				t.Fatalf("body %q, want %q", b, tt.want)
			}
		})
	}
}

var errAny = errors.New("any error")

// unknownLen is a 200 whose length is not declared, read in small pieces.
func unknownLen(body string) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: -1,
		Body: io.NopCloser(io.MultiReader(strings.NewReader(body[:len(body)/2]), strings.NewReader(body[len(body)/2:])))}
}

func TestErrorInfo(t *testing.T) {
	long := strings.Repeat("é日", 20<<10/5) // 20 KiB of 2- and 3-byte runes
	tests := []struct {
		name   string
		body   []byte
		header http.Header
		want   string
	}{
		{"nested OpenAI error", []byte(`{"error":{"message":"max_tokens must be positive","type":"invalid_request_error","param":null,"code":null}}`), nil, "max_tokens must be positive"},
		{"vLLM flat error", []byte(`{"object":"error","message":"bad prompt","type":"BadRequestError","param":null,"code":400}`), nil, "bad prompt"},
		{"flat error, object after message", []byte(`{"message":"late","object":"error"}`), nil, "late"},
		{"bare message is not an OpenAI error", []byte(`{"message":"nope"}`), nil, ""},
		{"object other than error", []byte(`{"object":"list","message":"nope"}`), nil, ""},
		{"error as a string", []byte(`{"error":"Not Found"}`), nil, ""},
		{"message null", []byte(`{"error":{"message":null}}`), nil, ""},
		{"fields before message with tricky strings", []byte(`{"id":[1,{"x":"}]"}],"error":{"type":"a\"}","code":{"n":[1,2]},"message":"deep"}}`), nil, "deep"},
		{"escapes decoded", []byte(`{"error":{"message":"a\n\"b\"\u00e9\ud83d\ude00\/"}}`), nil, "a\n\"b\"é😀/"},
		{"lone surrogate replaced", []byte(`{"error":{"message":"x\ud800y"}}`), nil, "x\uFFFDy"},
		{"invalid UTF-8 replaced", []byte("{\"error\":{\"message\":\"a\xffb\"}}"), nil, "a\uFFFDb"},
		{"HTML", []byte(`<html><body>502 Bad Gateway</body></html>`), nil, ""},
		{"plain text", []byte(`Internal Server Error`), nil, ""},
		{"empty", nil, nil, ""},
		{"whitespace around", []byte(" \n{ \"error\" : { \"message\" : \"spaced\" } } "), nil, "spaced"},
		{"gzip error body", gzipped(`{"error":{"message":"zipped"}}`), http.Header{"Content-Encoding": {"gzip"}}, "zipped"},
		{"unsupported encoding gives nothing", []byte(`{"error":{"message":"m"}}`), http.Header{"Content-Encoding": {"br"}}, ""},
		// ACCEPTANCE 197: a 20 KiB message, cut by the 8 KiB read, relayed ≤ 512 bytes.
		{"20 KiB message cut", []byte(`{"error":{"message":"` + long + `"}}`), nil, cutUTF8(long, 512)},
		{"20 KiB flat message cut", []byte(`{"object":"error","message":"` + long + `"}`), nil, cutUTF8(long, 512)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, logBody := ErrorInfo(fakeResp(tt.body, tt.header))
			if msg != tt.want {
				t.Errorf("msg = %q, want %q", msg, tt.want)
			}
			if len(msg) > ErrorMsgLimit || !utf8.ValidString(msg) {
				t.Errorf("msg: %d bytes, valid UTF-8 %v", len(msg), utf8.ValidString(msg))
			}
			if len(logBody) > ErrorBodyLimit {
				t.Errorf("log body %d bytes", len(logBody))
			}
		})
	}
	if got := cutUTF8(long, 512); len(got) < 509 || len(got) > 512 {
		t.Errorf("cut to %d bytes", len(got))
	}
}

// ACCEPTANCE 196: an error body is read at most 8 KiB for the log; its
// marker is only in the log body (the client reply is the engine's).
func TestErrorInfoLogBound(t *testing.T) {
	body := []byte("MARKER-5xx " + strings.Repeat("x", 20<<10))
	msg, logBody := ErrorInfo(fakeResp(body, nil))
	if msg != "" {
		t.Errorf("msg from a non-JSON 5xx: %q", msg)
	}
	if len(logBody) != ErrorBodyLimit || !bytes.HasPrefix(logBody, []byte("MARKER-5xx")) {
		t.Errorf("log body %d bytes, prefix %q", len(logBody), logBody[:10])
	}
	// A gzip bomb is bounded by the decoded size.
	msg, logBody = ErrorInfo(fakeResp(gzipped(strings.Repeat("y", 1<<20)), http.Header{"Content-Encoding": {"gzip"}}))
	if msg != "" || len(logBody) != ErrorBodyLimit {
		t.Errorf("gzip: msg %q, %d bytes", msg, len(logBody))
	}
}

func TestOpenAIMessageCutDocuments(t *testing.T) {
	full := `{"error":{"message":"hello world","type":"x"}}`
	for i := range len(full) {
		got := openAIMessage([]byte(full[:i]), 512)
		if !strings.HasPrefix("hello world", got) {
			t.Errorf("prefix %q gave %q", full[:i], got)
		}
	}
}
