package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Main is the celflow-bench command line: `celflow-bench [flags]` and its
// helper subcommands `worker`, `proxy` and `load`. Exit codes: 0 done, 1 a run failed, 2 bad usage.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "worker":
			return mainWorker(args[1:], stderr)
		case "proxy":
			return mainProxy(args[1:], stderr)
		case "load":
			return mainLoad(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("celflow-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: celflow-bench [flags]            the load benchmark; writes --out")
		fmt.Fprintln(stderr, "       celflow-bench worker --listen ADDR [--chunks N] [--gap D]")
		fmt.Fprintln(stderr, "       celflow-bench proxy --listen ADDR --to URL")
		fmt.Fprintln(stderr, "       celflow-bench load --url URL [--conc N] [--duration D] [--body small|200KB|stream]")
		fs.PrintDefaults()
	}
	out := fs.String("out", "docs/benchmarks.md", "the Markdown report to write")
	bin := fs.String("bin", "", "celflow binary whose serve is measured (default: the celflow beside this executable, else celflow on PATH)")
	tools := fs.String("tools-bin", "", "celflow-bench binary that runs the worker and proxy children (default: this executable)")
	dur := fs.Duration("duration", 5*time.Second, "measured time per cell")
	warm := fs.Duration("warmup", 1500*time.Millisecond, "warm-up per cell, not recorded")
	conc := fs.String("conc", "1,16,64", "closed-loop concurrencies")
	sconc := fs.String("stream-conc", "1,16", "concurrencies of the streaming cells")
	chunks := fs.Int("chunks", 20, "SSE events per streamed reply")
	gap := fs.Duration("gap", 2*time.Millisecond, "time between two SSE events at the worker")
	rounds := fs.Int("rounds", 5, "windows per cell, interleaved across the paths (duration and warm-up are split over them)")
	quick := fs.Bool("quick", false, "a few seconds: short cells, concurrency 1 and 16, no Go micro-benchmarks")
	goBench := fs.String("go-bench", "auto", "Go micro-benchmarks: auto (when go is on PATH and not --quick), on, off")
	only := fs.String("only", "", "run one cell alone and print its report section on stdout instead of writing --out: overload, cache; failover rewrites its own section in --out")
	simBin := fs.String("sim-bin", "", "celflow-sim binary of the cache cell's simulators (default: the celflow-sim beside this executable, else on PATH)")
	convs := fs.Int("cache-convs", DefaultCacheOptions.Convs, "cache cell: conversations (of 4 turns, 8 at a time)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "celflow-bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	o := Options{Bin: *bin, Tools: *tools, Warmup: *warm, Duration: *dur, Chunks: *chunks, Gap: *gap, Rounds: *rounds, Progress: stderr}
	var err error
	if o.Conc, err = parseInts(*conc); err == nil {
		o.StreamConc, err = parseInts(*sconc)
	}
	if err != nil {
		fmt.Fprintf(stderr, "celflow-bench: %v\n", err)
		return 2
	}
	if *convs < 1 || *convs > 10000 {
		fmt.Fprintf(stderr, "celflow-bench: --cache-convs %d: want 1..10000\n", *convs)
		return 2
	}
	o.Cache = DefaultCacheOptions
	o.Cache.Convs = *convs
	if *rounds < 1 || *rounds > 100 {
		fmt.Fprintf(stderr, "celflow-bench: --rounds %d: want 1..100\n", *rounds)
		return 2
	}
	if *quick {
		o.Cache.Convs = min(o.Cache.Convs, 24)
		o.Warmup, o.Duration, o.Conc, o.StreamConc, o.Chunks, o.Rounds = 100*time.Millisecond, 400*time.Millisecond, []int{1, 16}, []int{1}, 5, 1
	}
	if o.Tools == "" {
		if o.Tools, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "celflow-bench: %v\n", err)
			return 1
		}
	}
	if o.Bin == "" {
		if o.Bin, err = celflowBeside(o.Tools); err != nil {
			fmt.Fprintf(stderr, "celflow-bench: %v\n", err)
			return 1
		}
	}
	if o.Sim = *simBin; o.Sim == "" {
		o.Sim = toolBeside(o.Tools, "celflow-sim")
	}
	runGo := *goBench == "on" || (*goBench == "auto" && !*quick)
	if *goBench != "on" && *goBench != "off" && *goBench != "auto" {
		fmt.Fprintf(stderr, "celflow-bench: --go-bench %q: want auto, on or off\n", *goBench)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *only == "failover" {
		return runFailover(ctx, o, *out, stdout, stderr)
	}
	if *only != "" {
		return runOnly(ctx, o, *only, stdout, stderr)
	}
	if err := Run(ctx, o, *out, runGo); err != nil {
		fmt.Fprintf(stderr, "celflow-bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return 0
}

// celflowBeside finds the celflow binary a benchmark measures: the one in
// the same directory as tools (make build puts both in bin/), else celflow
// on PATH.
func celflowBeside(tools string) (string, error) {
	sib := filepath.Join(filepath.Dir(tools), "celflow")
	if fi, err := os.Stat(sib); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return sib, nil
	}
	if p, err := exec.LookPath("celflow"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no celflow binary beside %s nor on PATH: build it (make build) or name it with --bin", tools)
}

// toolBeside is the named tool in the same directory as tools (make build
// puts them all in bin/), else the name, looked up on PATH when run.
func toolBeside(tools, name string) string {
	sib := filepath.Join(filepath.Dir(tools), name)
	if fi, err := os.Stat(sib); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return sib
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return name
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("concurrency %q: want integers 1..4096, comma-separated", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func mainWorker(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow-bench worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	chunks := fs.Int("chunks", 20, "SSE events per streamed reply")
	gap := fs.Duration("gap", 2*time.Millisecond, "time between two SSE events")
	service := fs.Duration("service", 0, "time a decode reply takes (0: at once)")
	slots := fs.Int("slots", 0, "decode replies served at once when --service is set (0: unlimited)")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *slots < 0 {
		return 2
	}
	return serve("celflow-bench worker", *listen, NewWorker(*chunks, *gap, *service, *slots), stderr)
}

func mainProxy(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow-bench proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	to := fs.String("to", "", "base URL of the upstream")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return 2
	}
	u, err := url.Parse(*to)
	if err != nil || u.Scheme == "" || u.Host == "" {
		fmt.Fprintf(stderr, "celflow-bench proxy: --to %q: want a base URL such as http://127.0.0.1:8000\n", *to)
		return 2
	}
	return serve("celflow-bench proxy", *listen, NewProxy(u), stderr)
}

// serve runs h until SIGINT or SIGTERM; it prints the bound address on
// stderr.
func serve(name, listen string, h http.Handler, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	fmt.Fprintf(stderr, "%s listening on http://%s\n", name, ln.Addr())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second}
	go func() {
		<-ctx.Done()
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// mainLoad drives one URL with the benchmark's load generator and prints
// what it measured: for ad hoc comparisons (another worker, another proxy).
func mainLoad(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow-bench load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	u := fs.String("url", "", "full URL to POST to, e.g. http://127.0.0.1:8000/v1/chat/completions")
	conc := fs.Int("conc", 16, "closed-loop concurrency")
	dur := fs.Duration("duration", 5*time.Second, "measured time")
	warm := fs.Duration("warmup", time.Second, "warm-up, not recorded")
	which := fs.String("body", "small", "small, 200KB or stream")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *u == "" || *conc < 1 {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l := Load{URL: *u, Conc: *conc, Warmup: *warm, Duration: *dur}
	if *which == "stream" {
		l.Body = chatBody("Stream a short answer.", true)
		l.Header = sseAccept
		res, err := StreamLoad{Load: l}.Run(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "celflow-bench load: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%d streams, %d errors%s\nfirst chunk p50 %v p99 %v\nchunk latency p50 %v p99 %v\ncoalesced %d of %d events\n",
			res.Streams, res.Errors, errNote(0, res.FirstError), res.FirstChunk.P50, res.FirstChunk.P99,
			res.ChunkLat.P50, res.ChunkLat.P99, res.Coalesced, res.Events)
		return 0
	}
	for _, b := range bodies() {
		if b.key == *which {
			l.Body = b.data
		}
	}
	if l.Body == nil {
		fmt.Fprintf(stderr, "celflow-bench load: --body %q: want small, 200KB or stream\n", *which)
		return 2
	}
	res, err := l.Run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "celflow-bench load: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%.0f req/s, %d ok, %d errors%s\np50 %v p90 %v p99 %v max %v\n",
		res.RPS(), res.OK, res.Errors, errNote(0, res.FirstError), res.Latency.P50, res.Latency.P90, res.Latency.P99, res.Latency.Max)
	return 0
}

// runFailover runs the failover cell and rewrites its section in out.
func runFailover(ctx context.Context, o Options, out string, stdout, stderr io.Writer) int {
	cells, err := MeasureFailover(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "celflow-bench: %v\n", err)
		return 1
	}
	cwd, _ := os.Getwd()
	var b strings.Builder
	renderFailover(&b, cells, readMachine(moduleRoot(cwd), o.Bin))
	fmt.Fprintln(stdout, b.String())
	if err := writeFailover(out, b.String()); err != nil {
		fmt.Fprintf(stderr, "celflow-bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote the failover section of %s\n", out)
	return 0
}

// runOnly runs one cell (--only) and prints its section and its targets.
func runOnly(ctx context.Context, o Options, cell string, stdout, stderr io.Writer) int {
	if cell != "overload" && cell != "cache" {
		fmt.Fprintf(stderr, "celflow-bench: --only %q: want overload, cache or failover\n", cell)
		return 2
	}
	o.Only = cell
	res, err := Measure(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "celflow-bench: %v\n", err)
		return 1
	}
	if cell == "cache" {
		renderCache(stdout, res.Cache)
		fmt.Fprintf(stdout, "| target | source | measured | result |\n|---|---|---|---|\n")
		for _, c := range cacheChecks(res.Cache) {
			fmt.Fprintf(stdout, "| %s | %s | %s | %s |\n", c.Target, c.Source, c.Measured, c.Verdict)
		}
		return 0
	}
	renderOverload(stdout, res.Overload)
	fmt.Fprintf(stdout, "| target | source | measured | result |\n|---|---|---|---|\n")
	for _, c := range overloadChecks(res.Overload) {
		fmt.Fprintf(stdout, "| %s | %s | %s | %s |\n", c.Target, c.Source, c.Measured, c.Verdict)
	}
	return 0
}
