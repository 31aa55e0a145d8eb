package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// Events split across reads are reassembled; a read completing several
// events reports each; [DONE] has no stamp.
func TestEventScanner(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reads []string
		want  [][]int64 // stamps completed by each read
	}{
		{"one event per read", []string{"data: {\"t\":5}\n\n", "data: {\"t\":6}\n\n"}, [][]int64{{5}, {6}}},
		{"split inside the stamp", []string{"data: {\"t\":1", "23}\n", "\n"}, [][]int64{nil, nil, {123}}},
		{"coalesced", []string{"data: {\"t\":1}\n\ndata: {\"t\":2}\n\ndata: [DONE]\n\n"}, [][]int64{{1, 2, -1}}},
		{"no stamp, bad stamp", []string{"data: {}\n\ndata: {\"t\":x}\n\n"}, [][]int64{{-1, -1}}},
		{"last t wins", []string{"data: {\"t\":9,\"x\":{\"t\":3}}\n\n"}, [][]int64{{3}}},
	} {
		var e eventScanner
		for i, r := range tc.reads {
			if got := e.feed([]byte(r)); !slices.Equal(got, tc.want[i]) {
				t.Errorf("%s: read %d gave %v, want %v", tc.name, i, got, tc.want[i])
			}
		}
	}
}

// Through the bench worker, every stream has Chunks stamped events with a
// positive latency and first-chunk time.
func TestStreamLoad(t *testing.T) {
	srv := httptest.NewServer(&Worker{Chunks: 4, Gap: time.Millisecond})
	defer srv.Close()
	l := StreamLoad{Load: Load{URL: srv.URL + "/v1/chat/completions", Body: chatBody("x", true), Header: sseAccept,
		Conc: 2, Warmup: 20 * time.Millisecond, Duration: 150 * time.Millisecond}, Chunks: 4}
	res, err := l.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Streams == 0 || res.Errors != 0 || res.FirstError != "" {
		t.Fatalf("%+v", res)
	}
	if res.Events != 4*res.Streams || res.ChunkLat.N != res.Events || res.Gap.N != 3*res.Streams {
		t.Errorf("events %d, latencies %d, gaps %d for %d streams", res.Events, res.ChunkLat.N, res.Gap.N, res.Streams)
	}
	if res.FirstChunk.P50 <= 0 || res.ChunkLat.P50 <= 0 || res.Gap.P50 < 500*time.Microsecond {
		t.Errorf("first %v, latency %v, gap %v", res.FirstChunk.P50, res.ChunkLat.P50, res.Gap.P50)
	}
}

// A stream with the wrong number of events, or a non-2xx, is an error.
func TestStreamLoadErrors(t *testing.T) {
	srv := httptest.NewServer(&Worker{Chunks: 2})
	defer srv.Close()
	for _, tc := range []struct {
		name, path string
		hdr        http.Header
	}{
		{"too few events", "/v1/chat/completions", sseAccept},
		{"not a stream", "/v1/chat/completions", nil},
		{"412", "/v1/chat/completions", http.Header{"Prefer": {"if-available"}}},
	} {
		l := StreamLoad{Load: Load{URL: srv.URL + tc.path, Header: tc.hdr, Conc: 1, Duration: 50 * time.Millisecond, MaxRequests: 5}, Chunks: 3}
		res, err := l.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Streams != 0 || res.FirstError == "" {
			t.Errorf("%s: %d streams, first error %q", tc.name, res.Streams, res.FirstError)
		}
	}
}
