package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Load is one closed-loop cell: Conc workers each send a request, read the
// whole reply, and send the next, first for Warmup (not recorded), then for
// Duration (recorded). A request counts when it completes inside the
// measured window, wherever it started: throughput is completions per
// second of window, unbiased however long a request takes next to the
// window. MaxRequests bounds the total sent, warm-up included, so a broken
// fast path cannot spin forever.
type Load struct {
	URL         string
	Body        []byte
	Header      http.Header // extra request headers; Content-Type is always JSON
	Conc        int
	Warmup      time.Duration
	Duration    time.Duration
	MaxRequests int64
	Timeout     time.Duration // per request; default 10s
	// OnWindow, when set, is called when the measured window opens (start)
	// and when it closes (stop), from the driver's own goroutine: the place
	// to read the CPU counters of the processes under test.
	OnWindow func(start bool)
}

// Result is what a Load measured.
type Result struct {
	OK      int           // 2xx replies completed inside the window
	Errors  int           // transport errors and non-2xx inside the window
	Window  time.Duration // the measured window
	Latency Dist          // of the OK requests
	// FirstError describes the first failure seen (warm-up included), for
	// the log: a benchmark of error replies measures nothing.
	FirstError string

	samples []time.Duration // OK latencies, kept for Merge
}

// Merge adds another window's measurements of the same cell (a later
// round) to r.
func (r *Result) Merge(o Result) {
	r.OK += o.OK
	r.Errors += o.Errors
	r.Window += o.Window
	if r.FirstError == "" {
		r.FirstError = o.FirstError
	}
	r.samples = append(r.samples, o.samples...)
	r.Latency = Summarise(r.samples)
}

// RPS is completed 2xx requests per second of window.
func (r Result) RPS() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.OK) / r.Window.Seconds()
}

// NewTransport is the load generator's HTTP client setup, the same for
// every target so ratios compare the servers, not the clients: keep-alive,
// enough idle connections for the concurrency, no compression, HTTP/1.1.
func NewTransport(conc int) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conc + 16,
		MaxIdleConnsPerHost: conc + 16,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

// Run executes l with a fresh transport and returns what it measured.
func (l Load) Run(ctx context.Context) (Result, error) {
	if l.Conc < 1 || l.Duration <= 0 || l.URL == "" {
		return Result{}, fmt.Errorf("bench: load needs a URL, concurrency ≥ 1 and a duration")
	}
	if l.MaxRequests <= 0 {
		l.MaxRequests = 10_000_000
	}
	if l.Timeout <= 0 {
		l.Timeout = 10 * time.Second
	}
	tr := NewTransport(l.Conc)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: l.Timeout}
	w := window{l.Conc, l.Warmup, l.Duration, l.MaxRequests, l.OnWindow}
	samples, errs, first, err := closedLoop(ctx, w, func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		err := l.once(ctx, client)
		return time.Since(start), err
	})
	if err != nil {
		return Result{}, err
	}
	return Result{OK: len(samples), Errors: errs, Window: l.Duration, Latency: Summarise(samples), FirstError: first, samples: samples}, nil
}

// window is the shape of a closed-loop run.
type window struct {
	conc             int
	warmup, duration time.Duration
	max              int64
	onWindow         func(start bool)
}

// closedLoop runs w.conc workers calling fn back to back until the window
// closes or w.max calls were made. It keeps the sample of each call that
// ended inside the window; errors are counted the same way. first is the
// first error seen, warm-up included.
func closedLoop[S any](ctx context.Context, w window, fn func(context.Context) (S, error)) (samples []S, errs int, first string, err error) {
	begin := time.Now()
	t0 := begin.Add(w.warmup)
	t1 := t0.Add(w.duration)
	var sent atomic.Int64
	var firstErr atomic.Pointer[string]
	type local struct {
		got  []S
		errs int
	}
	locals := make([]local, w.conc)
	var wg sync.WaitGroup
	for i := range locals {
		wg.Add(1)
		go func(lc *local) {
			defer wg.Done()
			for ctx.Err() == nil && sent.Add(1) <= w.max {
				start := time.Now()
				if !start.Before(t1) {
					return
				}
				s, err := fn(ctx)
				end := time.Now()
				if err != nil {
					msg := err.Error()
					firstErr.CompareAndSwap(nil, &msg)
				}
				if end.Before(t0) || end.After(t1) {
					continue
				}
				if err != nil {
					lc.errs++
				} else {
					lc.got = append(lc.got, s)
				}
			}
		}(&locals[i])
	}
	if w.onWindow != nil {
		sleepUntil(ctx, t0)
		w.onWindow(true)
		sleepUntil(ctx, t1)
		w.onWindow(false)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, 0, "", err
	}
	for _, lc := range locals {
		samples = append(samples, lc.got...)
		errs += lc.errs
	}
	if p := firstErr.Load(); p != nil {
		first = *p
	}
	return samples, errs, first, nil
}

// once sends one request and reads the whole reply.
func (l Load) once(ctx context.Context, c *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.URL, bytes.NewReader(l.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range l.Header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &statusError{resp.StatusCode}
	}
	return nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d", e.code) }

func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}
