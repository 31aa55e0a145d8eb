// Package bench is the celflow-bench binary: the load benchmark of issue 7.
// It runs, as separate processes, a fixed-response worker (`celflow-bench
// worker`) and a bare httputil.ReverseProxy (`celflow-bench proxy`), both
// of the benchmark's own binary, and `celflow serve` of the celflow binary
// with generated configs, drives each with one
// closed-loop Go load generator, and writes docs/benchmarks.md: requests/s,
// p50/p99 latency and CPU per request side by side, the ratios
// celflow/bare-proxy, streaming first-chunk and per-chunk latencies, and the
// targets of docs/benchmarks.md with met or not met.
//
// The numbers are noisy on shared two-core machines; the ratios taken within
// one run are what carry from run to run (docs/benchmarks.md). Nothing here is on
// celflow's request path.
package bench
