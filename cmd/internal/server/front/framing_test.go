package front

import (
	"strconv"
	"strings"
	"testing"
)

// feedAll runs a stream through a fresh tracker in pieces of size step
// (0: whole).
func feedAll(stream string, step int) framing {
	f := framing{maxLine: 1 << 16}
	b := []byte(stream)
	if step <= 0 {
		step = len(b) + 1
	}
	for len(b) > 0 {
		n := min(step, len(b))
		f.feed(b[:n])
		b = b[n:]
	}
	return f
}

func TestFramingTracker(t *testing.T) {
	const (
		req  = "POST / HTTP/1.1\r\nHost: x\r\n"
		ok2  = req + "Content-Length: 2\r\n\r\n{}"
		chnk = req + "Transfer-Encoding: chunked\r\n\r\n2;a=b\r\n{}\r\n0\r\nT: 1\r\n\r\n"
		fake = "\r\n\r\nPOST / HTTP/1.1\r\nTransfer-Encoding: x\r\n\r\n"
	)
	// badAt: the request net/http would serve that its handler refuses;
	// reject: the block net/http would refuse itself, refused by framedConn.
	tests := []struct {
		name   string
		stream string
		blocks int
		badAt  int
		reject bool
	}{
		{"one CL request", ok2, 1, 0, false},
		{"CL then chunked then CL", ok2 + chnk + ok2, 3, 0, false},
		{"LF-only lines", "POST / HTTP/1.1\nContent-Length: 2\n\n{}" + ok2, 2, 0, false},
		{"no body", req + "\r\n" + ok2, 2, 0, false},
		{"CL+TE", req + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 1, 1, false},
		{"CL+TE second", ok2 + req + "transfer-encoding: chunked\r\nCONTENT-LENGTH: 5\r\n\r\n", 2, 2, false},
		{"TE on 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 1, 1, false},
		{"TE not chunked", req + "Transfer-Encoding: gzip, chunked\r\n\r\n", 1, 0, true},
		{"two TE lines", req + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 1, 0, true},
		{"differing CL", req + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n", 1, 0, true},
		{"equal CLs are fine", req + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}" + ok2, 2, 0, false},
		{"CL not a number", req + "Content-Length: +2\r\n\r\n", 1, 0, true},
		{"folded header", req + "X-A: 1\r\n  continued\r\n\r\n", 1, 1, false},
		{"TE gzip on HTTP/1.0 is served by net/http", "POST / HTTP/1.0\r\nTransfer-Encoding: gzip\r\n\r\n", 1, 1, false},
		{"differing CLs on HTTP/1.0 with TE", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 1, 0, true},
		{"HTTP/1.2 is tracked too", "POST / HTTP/1.2\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 1, 1, false},
		{"raw bytes in the target", "POST /\xff\x01 HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 1, 1, false},
		{"not HTTP: tracking stops", "\x16\x03\x01\x02\x00\n \n\n" + ok2, 0, 0, false},
		{"fake headers inside a body", req + "Content-Length: " + strconv.Itoa(len(fake)) + "\r\n\r\n" + fake + ok2, 2, 0, false},
	}
	for _, tt := range tests {
		for _, step := range []int{0, 1, 3, 7} {
			f := feedAll(tt.stream, step)
			if f.blocks != tt.blocks || f.badAt != tt.badAt || (f.bad != "") != (tt.badAt > 0) || (f.reject != "") != tt.reject {
				t.Errorf("%s (step %d): blocks %d badAt %d bad %q reject %q; want %d, %d, %v", tt.name, step, f.blocks, f.badAt, f.bad, f.reject, tt.blocks, tt.badAt, tt.reject)
			}
		}
	}
}

// A header line longer than maxLine stops tracking (net/http answers 431).
func TestFramingLongLine(t *testing.T) {
	f := framing{maxLine: 10}
	f.feed([]byte("POST / HTTP/1.1\r\n"))
	if f.state != fsDead {
		t.Fatalf("state %d", f.state)
	}
}

// FuzzFraming: the tracker never panics, and its verdict does not depend on
// how the stream is split into reads.
func FuzzFraming(f *testing.F) {
	for _, s := range []string{
		"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
	} {
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, s string, step uint8) {
		whole := feedAll(s, 0)
		split := feedAll(s, int(step%16)+1)
		if whole.blocks != split.blocks || whole.badAt != split.badAt || whole.bad != split.bad || whole.reject != split.reject ||
			whole.state != split.state || whole.remain != split.remain {
			t.Fatalf("split %d changes the verdict: %+v vs %+v", step%16+1, whole, split)
		}
	})
}

// The framing tracker's cost per request: a header block and a 256 KiB
// Content-Length body, fed in 32 KiB reads as net/http does.
func BenchmarkFramingFeed(b *testing.B) {
	body := strings.Repeat("x", 256<<10)
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: celflow\r\nUser-Agent: bench\r\nContent-Type: application/json\r\nAuthorization: Bearer t\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	f := framing{maxLine: 1 << 20}
	for b.Loop() {
		for p := req; len(p) > 0; {
			n := min(32<<10, len(p))
			f.feed(p[:n])
			p = p[n:]
		}
	}
	if f.state != fsHeader || f.bad != "" {
		b.Fatalf("state %d bad %q", f.state, f.bad)
	}
}
