package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// StreamLoad drives streaming requests closed-loop. The bench worker stamps
// every SSE event with its send time (`"t":<unix ns>`, wall clock, same
// machine), so the reader measures each chunk's latency from the worker's
// write to the client's read, hop included. A read that completes more than
// one event is a coalesced read: the chunks were delivered together.
type StreamLoad struct {
	Load
	Chunks int // events expected per stream (without [DONE]); 0 = any
}

// StreamResult is what a StreamLoad measured.
type StreamResult struct {
	Streams    int
	Errors     int
	FirstChunk Dist // request sent → first event read
	ChunkLat   Dist // worker's write → client's read, every event
	Gap        Dist // between consecutive events of a stream, at the client
	Events     int  // events read in the window
	Coalesced  int  // events that arrived in a read with an earlier event
	FirstError string

	firsts, lat, gaps []time.Duration // kept for Merge
}

// Merge adds a later round of the same cell to r.
func (r *StreamResult) Merge(o StreamResult) {
	r.Streams += o.Streams
	r.Errors += o.Errors
	r.Events += o.Events
	r.Coalesced += o.Coalesced
	if r.FirstError == "" {
		r.FirstError = o.FirstError
	}
	r.firsts = append(r.firsts, o.firsts...)
	r.lat = append(r.lat, o.lat...)
	r.gaps = append(r.gaps, o.gaps...)
	r.FirstChunk, r.ChunkLat, r.Gap = Summarise(r.firsts), Summarise(r.lat), Summarise(r.gaps)
}

// streamSample is one stream's measurements.
type streamSample struct {
	first     time.Duration
	lat, gaps []time.Duration
	events    int
	coalesced int
}

// Run executes the streaming cell.
func (l StreamLoad) Run(ctx context.Context) (StreamResult, error) {
	if l.Conc < 1 || l.Duration <= 0 || l.URL == "" {
		return StreamResult{}, fmt.Errorf("bench: stream load needs a URL, concurrency ≥ 1 and a duration")
	}
	if l.MaxRequests <= 0 {
		l.MaxRequests = 1_000_000
	}
	if l.Timeout <= 0 {
		l.Timeout = 30 * time.Second
	}
	tr := NewTransport(l.Conc)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: l.Timeout}
	w := window{l.Conc, l.Warmup, l.Duration, l.MaxRequests, l.OnWindow}
	samples, errs, first, err := closedLoop(ctx, w, func(ctx context.Context) (streamSample, error) {
		return l.once(ctx, client)
	})
	if err != nil {
		return StreamResult{}, err
	}
	res := StreamResult{Streams: len(samples), Errors: errs, FirstError: first}
	for _, s := range samples {
		res.firsts = append(res.firsts, s.first)
		res.lat = append(res.lat, s.lat...)
		res.gaps = append(res.gaps, s.gaps...)
		res.Events += s.events
		res.Coalesced += s.coalesced
	}
	res.FirstChunk, res.ChunkLat, res.Gap = Summarise(res.firsts), Summarise(res.lat), Summarise(res.gaps)
	return res, nil
}

func (l StreamLoad) once(ctx context.Context, c *http.Client) (streamSample, error) {
	var s streamSample
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.URL, bytes.NewReader(l.Body))
	if err != nil {
		return s, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range l.Header {
		req.Header[k] = v
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return s, &statusError{resp.StatusCode}
	}
	sc := eventScanner{}
	buf := make([]byte, 32<<10)
	var last time.Time
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			now := time.Now()
			stamps := sc.feed(buf[:n])
			for i, st := range stamps {
				if st < 0 { // [DONE] or an unstamped event
					continue
				}
				if s.events == 0 {
					s.first = now.Sub(start)
				} else {
					s.gaps = append(s.gaps, now.Sub(last))
				}
				if i > 0 {
					s.coalesced++
				}
				s.events++
				last = now
				s.lat = append(s.lat, now.Sub(time.Unix(0, st)))
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return s, rerr
		}
	}
	if l.Chunks > 0 && s.events != l.Chunks {
		return s, fmt.Errorf("stream: %d events, want %d", s.events, l.Chunks)
	}
	return s, nil
}

// eventScanner splits an SSE byte stream into events (ended by a blank
// line) across reads.
type eventScanner struct{ pending []byte }

// feed adds one read and returns, for each event it completed, the event's
// "t" stamp (-1 when it has none, as [DONE]).
func (e *eventScanner) feed(p []byte) []int64 {
	e.pending = append(e.pending, p...)
	var out []int64
	for {
		i := bytes.Index(e.pending, []byte("\n\n"))
		if i < 0 {
			return out
		}
		out = append(out, stampOf(e.pending[:i]))
		e.pending = e.pending[i+2:]
	}
}

// stampOf reads the integer after the last `"t":` of an event.
func stampOf(ev []byte) int64 {
	i := bytes.LastIndex(ev, []byte(`"t":`))
	if i < 0 {
		return -1
	}
	j := i + 4
	k := j
	for k < len(ev) && ev[k] >= '0' && ev[k] <= '9' {
		k++
	}
	v, err := strconv.ParseInt(string(ev[j:k]), 10, 64)
	if err != nil {
		return -1
	}
	return v
}
