package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// Options configure one benchmark run.
type Options struct {
	Bin        string        // the celflow binary the celflow children (`celflow serve`) run
	Tools      string        // the celflow-bench binary the worker and proxy children run
	Warmup     time.Duration // per cell (split over the rounds), not recorded
	Duration   time.Duration // per cell (split over the rounds), recorded
	Conc       []int         // closed-loop concurrencies of the request matrix
	StreamConc []int         // concurrencies of the streaming cells
	Chunks     int           // SSE events per streamed reply
	Gap        time.Duration // between two events at the worker
	Rounds     int           // windows per cell, interleaved across targets
	Progress   io.Writer     // one line per cell
	// Only, when "overload" or "cache", runs that cell alone (overload.go,
	// cache.go).
	Only string
	// Sim is the celflow-sim binary the cache cell's simulators run
	// (default: the celflow-sim beside Tools, else on PATH).
	Sim string
	// Cache sizes the cache cell's workload (zero: DefaultCacheOptions).
	Cache CacheOptions
}

// target is one thing the load generator hits.
type target struct {
	key, title string
	url        string // base URL
	hop        *proc  // the process whose CPU is the hop's (the worker for "direct")
	legs       int    // worker legs per request (0 for direct)
	celflow    bool
}

// Cell is one measured cell of the request matrix, all its rounds merged.
type Cell struct {
	Conc     int
	Body     string // body key
	Target   string // target key
	Res      Result
	Handover handover // celflow targets: the windows' hand-overs

	hopCPU, workerCPU time.Duration // over the windows
}

// HopCPU is the CPU time of the measured process per completed request.
func (c Cell) HopCPU() time.Duration { return perReq(c.hopCPU, c.Res.OK) }

// WorkerCPU is the worker's CPU time per completed request (0 for
// direct, where the worker is the hop).
func (c Cell) WorkerCPU() time.Duration { return perReq(c.workerCPU, c.Res.OK) }

func perReq(d time.Duration, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return d / time.Duration(n)
}

// StreamCell is one measured streaming cell.
type StreamCell struct {
	Conc   int
	Target string
	Res    StreamResult
}

// Results is everything a run measured.
type Results struct {
	Opts     Options
	Targets  []target
	Bodies   []body
	Cells    []Cell
	Streams  []StreamCell
	Overload *OverloadResult // the admission cell; nil when not run
	Cache    *CacheResult    // the cache-aware routing cell; nil when not run
}

// Measure starts the worker, the bare proxy and one celflow per workflow,
// runs the request matrix and the streaming cells, and stops them all.
func Measure(ctx context.Context, o Options) (*Results, error) {
	dir, err := os.MkdirTemp("", "celflow-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	// start runs one child on a free port: extra(addr) gives the arguments
	// that tell it where to listen.
	start := func(bin, name, ready string, extra func(addr string) ([]string, error), args ...string) (*proc, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		more, err := extra(addr)
		if err != nil {
			return nil, err
		}
		p, err := startProc(ctx, name, bin, "http://"+addr, ready, append(args, more...)...)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		return p, nil
	}
	listen := func(addr string) ([]string, error) { return []string{"--listen", addr}, nil }
	if o.Only == "cache" {
		r := &Results{Opts: o}
		r.Cache, err = measureCache(ctx, o, dir, start)
		return r, err
	}
	if o.Only == "overload" {
		r := &Results{Opts: o}
		r.Overload, err = measureOverload(ctx, o, dir, start)
		if err == nil {
			progressOverload(o.Progress, r.Overload)
		}
		return r, err
	}
	worker, err := start(o.Tools, "worker", "/healthz", listen, "worker",
		"--chunks", fmt.Sprint(o.Chunks), "--gap", o.Gap.String())
	if err != nil {
		return nil, err
	}
	proxy, err := start(o.Tools, "proxy", "/healthz", listen, "proxy", "--to", worker.url)
	if err != nil {
		return nil, err
	}
	r := &Results{Opts: o, Bodies: bodies()}
	r.Targets = []target{
		{key: "direct", title: "worker directly", url: worker.url, hop: worker},
		{key: "proxy", title: "bare httputil.ReverseProxy", url: proxy.url, hop: proxy, legs: 1},
	}
	for _, f := range flows {
		p, err := start(o.Bin, "celflow "+f.key, "/readyz", func(addr string) ([]string, error) {
			cfg, err := writeConfig(dir, f, addr, worker.url)
			return []string{"--config", cfg}, err
		}, "serve")
		if err != nil {
			return nil, err
		}
		r.Targets = append(r.Targets, target{key: f.key, title: f.title, url: p.url, hop: p, legs: f.legs, celflow: true})
	}

	rounds := max(1, o.Rounds)
	win, warm := o.Duration/time.Duration(rounds), o.Warmup/time.Duration(rounds)
	for _, conc := range o.Conc {
		for _, b := range r.Bodies {
			cells := make([]Cell, len(r.Targets))
			for i, t := range r.Targets {
				cells[i] = Cell{Conc: conc, Body: b.key, Target: t.key}
			}
			for _, i := range interleave(len(r.Targets), rounds) {
				if err := measureCell(ctx, &cells[i], r.Targets[i], worker, b, conc, warm, win); err != nil {
					return nil, err
				}
			}
			for _, c := range cells {
				r.Cells = append(r.Cells, c)
				progress(o.Progress, "c=%-3d %-6s %-7s %8.0f req/s  p50 %-9s p99 %-9s cpu %s/req%s",
					conc, b.key, c.Target, c.Res.RPS(), round(c.Res.Latency.P50), round(c.Res.Latency.P99), round(c.HopCPU()), errNote(c.Res.Errors, c.Res.FirstError))
			}
		}
	}

	stream := chatBody("Stream a short answer.", true)
	var st []target
	for _, t := range r.Targets {
		if t.key != "epd" { // the same relay as pd; keeps the run short
			st = append(st, t)
		}
	}
	for _, conc := range o.StreamConc {
		cells := make([]StreamCell, len(st))
		for _, i := range interleave(len(st), rounds) {
			l := StreamLoad{Load: Load{URL: st[i].url + "/v1/chat/completions", Body: stream, Conc: conc, Header: sseAccept,
				Warmup: warm, Duration: win}, Chunks: o.Chunks}
			res, err := l.Run(ctx)
			if err != nil {
				return nil, err
			}
			cells[i].Conc, cells[i].Target = conc, st[i].key
			cells[i].Res.Merge(res)
		}
		for _, c := range cells {
			r.Streams = append(r.Streams, c)
			res := c.Res
			progress(o.Progress, "stream c=%-3d %-7s %5d streams  first %-9s chunk p50 %-9s p99 %-9s coalesced %d%s",
				conc, c.Target, res.Streams, round(res.FirstChunk.P50), round(res.ChunkLat.P50), round(res.ChunkLat.P99), res.Coalesced, errNote(res.Errors, res.FirstError))
		}
	}
	if r.Overload, err = measureOverload(ctx, o, dir, start); err != nil {
		return nil, err
	}
	progressOverload(o.Progress, r.Overload)
	for _, p := range procs {
		if !p.alive() {
			return nil, fmt.Errorf("%s died during the run", p.name)
		}
	}
	// Last: the cache cell stops its own simulators and celflows after
	// each arm (fresh caches for the next).
	if r.Cache, err = measureCache(ctx, o, dir, start); err != nil {
		return nil, err
	}
	return r, nil
}

// interleave is the order of a matrix group's windows: rounds passes over
// n targets, every other pass reversed, so that a slow drift of the
// machine's background load weighs on every target alike.
func interleave(n, rounds int) []int {
	var out []int
	for r := range rounds {
		for k := range n {
			if r%2 == 1 {
				k = n - 1 - k
			}
			out = append(out, k)
		}
	}
	return out
}

// measureCell runs one closed-loop window against t and adds it to c,
// reading the CPU counters of the hop and the worker (and celflow's
// hand-over histogram) at the window's edges.
func measureCell(ctx context.Context, c *Cell, t target, worker *proc, b body, conc int, warm, win time.Duration) error {
	var hop0, hop1, w0, w1 time.Duration
	var h0, h1 handover
	var cpuErr error
	mc := &http.Client{Timeout: 2 * time.Second}
	read := func(start bool) {
		hop, err := t.hop.cpuTime()
		wk, err2 := worker.cpuTime()
		if err == nil {
			err = err2
		}
		var h handover
		if t.celflow {
			h, _ = scrapeHandover(mc, t.url)
		}
		if err != nil {
			cpuErr = err
		}
		if start {
			hop0, w0, h0 = hop, wk, h
		} else {
			hop1, w1, h1 = hop, wk, h
		}
	}
	l := Load{URL: t.url + "/v1/chat/completions", Body: b.data, Conc: conc, Warmup: warm, Duration: win, OnWindow: read}
	res, err := l.Run(ctx)
	if err != nil {
		return err
	}
	if cpuErr != nil {
		return fmt.Errorf("reading CPU time: %w", cpuErr)
	}
	c.Res.Merge(res)
	c.hopCPU += hop1 - hop0
	if t.key != "direct" {
		c.workerCPU += w1 - w0
	}
	c.Handover = c.Handover.add(h1.sub(h0))
	return nil
}

// sseAccept asks the worker for a stream (see Worker).
var sseAccept = http.Header{"Accept": {"text/event-stream"}}

func progress(w io.Writer, format string, a ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", a...)
	}
}

func errNote(n int, first string) string {
	if n == 0 && first == "" {
		return ""
	}
	return fmt.Sprintf("  (%d errors; first: %s)", n, first)
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
