package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The overload cell (issue 12, admission control). A worker with a service
// model (each decode reply takes OverloadService in one of OverloadSlots
// slots, FIFO beyond: a GPU batch) saturates at a known concurrency, which
// the cell finds again from a closed-loop sweep: the smallest concurrency
// reaching 90% of the best throughput. celflow (decode-only) runs with
// admission.max_in_flight set to it and no queue. Then:
//   - unloaded: closed loop at concurrency 1 through celflow, the p99 to
//     compare with;
//   - saturated: closed loop at the bound through celflow, its throughput X;
//   - overload: open loop at 2X for the window: every request is sent on
//     its schedule whatever the replies (no retry: what the server does with
//     excess load is the subject), and every one is classified: 200
//     admitted, 429 with Retry-After rejected, anything else (another
//     status, a transport error, a 10 s timeout: a hang) other.
const (
	OverloadService = 20 * time.Millisecond
	OverloadSlots   = 8
)

// OverloadResult is what the overload cell measured.
type OverloadResult struct {
	Service time.Duration
	Slots   int
	Sweep   []SweepPoint // through the worker directly
	Bound   int          // admission.max_in_flight: the saturating concurrency

	Unloaded Dist    // concurrency 1 through celflow
	SatRPS   float64 // closed loop at Bound through celflow
	Offered  float64 // req/s of the open loop (2 × SatRPS)
	Window   time.Duration

	Sent, Admitted, Rejected, Other int
	AdmittedLat, RejectedLat        Dist
	FirstOther                      string
}

// SweepPoint is one closed-loop window of the saturation sweep.
type SweepPoint struct {
	Conc int
	RPS  float64
}

// saturation is the smallest concurrency whose throughput reaches 90% of
// the sweep's best.
func saturation(sweep []SweepPoint) int {
	best := 0.0
	for _, p := range sweep {
		best = max(best, p.RPS)
	}
	for _, p := range sweep {
		if p.RPS >= 0.9*best {
			return p.Conc
		}
	}
	return 1
}

// starter runs one child process (Measure's start).
type starter func(bin, name, ready string, extra func(addr string) ([]string, error), args ...string) (*proc, error)

// measureOverload runs the overload cell with its own worker and celflow.
func measureOverload(ctx context.Context, o Options, dir string, start starter) (*OverloadResult, error) {
	r := &OverloadResult{Service: OverloadService, Slots: OverloadSlots, Window: o.Duration}
	listen := func(addr string) ([]string, error) { return []string{"--listen", addr}, nil }
	worker, err := start(o.Tools, "worker (slots)", "/healthz", listen, "worker",
		"--service", OverloadService.String(), "--slots", fmt.Sprint(OverloadSlots))
	if err != nil {
		return nil, err
	}
	small := chatBody("Say hello in one word.", false)
	sweepWin := max(300*time.Millisecond, o.Duration/5)
	warm := max(50*time.Millisecond, o.Warmup/4)
	for _, c := range []int{1, 2, 4, 8, 16, 32} {
		res, err := Load{URL: worker.url + "/v1/chat/completions", Body: small, Conc: c, Warmup: warm, Duration: sweepWin}.Run(ctx)
		if err != nil {
			return nil, err
		}
		r.Sweep = append(r.Sweep, SweepPoint{c, res.RPS()})
	}
	r.Bound = saturation(r.Sweep)

	cf, err := start(o.Bin, "celflow admission", "/readyz", func(addr string) ([]string, error) {
		cfg := serveConfig(flows[0], addr, worker.url) +
			fmt.Sprintf("admission: {max_in_flight: %d, max_queue: 0, retry_after: 1s}\n", r.Bound)
		p := filepath.Join(dir, "serve-admission.yaml")
		return []string{"--config", p}, os.WriteFile(p, []byte(cfg), 0o644)
	}, "serve")
	if err != nil {
		return nil, err
	}
	url := cf.url + "/v1/chat/completions"
	unl, err := Load{URL: url, Body: small, Conc: 1, Warmup: o.Warmup, Duration: o.Duration}.Run(ctx)
	if err != nil {
		return nil, err
	}
	sat, err := Load{URL: url, Body: small, Conc: r.Bound, Warmup: o.Warmup, Duration: o.Duration}.Run(ctx)
	if err != nil {
		return nil, err
	}
	if unl.Errors > 0 || sat.Errors > 0 || sat.OK == 0 {
		return nil, fmt.Errorf("overload cell: the unloaded or saturated window failed (%d, %d errors; first: %s%s)",
			unl.Errors, sat.Errors, unl.FirstError, sat.FirstError)
	}
	r.Unloaded, r.SatRPS = unl.Latency, sat.RPS()
	r.Offered = 2 * r.SatRPS
	openLoop(ctx, r, url, small)
	return r, nil
}

// openLoop sends Offered × Window requests on a fixed schedule, each on
// its own goroutine, and classifies every reply.
func openLoop(ctx context.Context, r *OverloadResult, url string, body []byte) {
	n := int(r.Offered * r.Window.Seconds())
	interval := time.Duration(float64(time.Second) / r.Offered)
	tr := NewTransport(4*r.Bound + 64)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		adm, rej []time.Duration
	)
	begin := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sleepUntil(ctx, begin.Add(time.Duration(i)*interval))
		r.Sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			code, retry, err := postOnce(ctx, client, url, body)
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && code == http.StatusOK:
				adm = append(adm, d)
			case err == nil && code == http.StatusTooManyRequests && retry != "":
				rej = append(rej, d)
			default:
				r.Other++
				if r.FirstOther == "" {
					r.FirstOther = fmt.Sprintf("HTTP %d (Retry-After %q) %v", code, retry, err)
				}
			}
		}()
	}
	wg.Wait()
	r.Admitted, r.Rejected = len(adm), len(rej)
	r.AdmittedLat, r.RejectedLat = Summarise(adm), Summarise(rej)
}

// postOnce sends one request and reads the whole reply.
func postOnce(ctx context.Context, c *http.Client, url string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), err
}

// overloadChecks are the issue 12 targets of the cell.
func overloadChecks(r *OverloadResult) []Check {
	const src = "issue 12"
	if r == nil {
		return []Check{{"overload (2× saturation): admitted p99 ≤ 2× unloaded p99", src, "cell not run", notMeasure}}
	}
	lat := Check{Target: "overload (2× saturation): admitted p99 ≤ 2× unloaded p99", Source: src,
		Measured: fmt.Sprintf("%s vs unloaded %s (%.2f×)", ms(r.AdmittedLat.P99), ms(r.Unloaded.P99),
			float64(r.AdmittedLat.P99)/float64(max(r.Unloaded.P99, 1)))}
	lat.Verdict = verdict(r.Admitted > 0 && r.AdmittedLat.P99 <= 2*r.Unloaded.P99)
	rej := Check{Target: "overload: the rest get 429 with Retry-After within 10 ms (p99)", Source: src,
		Measured: fmt.Sprintf("%d rejected, p99 %s, max %s", r.Rejected, ms(r.RejectedLat.P99), ms(r.RejectedLat.Max))}
	rej.Verdict = verdict(r.Rejected > 0 && r.RejectedLat.P99 <= 10*time.Millisecond)
	lost := Check{Target: "overload: nothing lost or hung (admitted + rejected = sent)", Source: src,
		Measured: fmt.Sprintf("%d + %d = %d of %d sent, %d other", r.Admitted, r.Rejected, r.Admitted+r.Rejected, r.Sent, r.Other)}
	lost.Verdict = verdict(r.Other == 0 && r.Admitted+r.Rejected == r.Sent)
	return []Check{lat, rej, lost}
}

// renderOverload is the report's section for the cell.
func renderOverload(b io.Writer, r *OverloadResult) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Overload (admission control)\n\n")
	if r == nil {
		p("Not run.\n\n")
		return
	}
	p("A worker whose decode reply takes %s in one of %d slots (FIFO beyond) saturates where the\n", r.Service, r.Slots)
	p("closed-loop sweep's throughput stops growing; celflow decode-only runs with\n")
	p("`admission.max_in_flight` set to that concurrency and no queue (`max_queue: 0`). The overload is\n")
	p("an open loop at twice celflow's saturated throughput for %s: every request is sent on its\n", r.Window)
	p("schedule and none is retried, and every reply is counted.\n\n")
	p("| sweep concurrency (worker directly) |")
	for _, s := range r.Sweep {
		p(" %d |", s.Conc)
	}
	p("\n|---|")
	for range r.Sweep {
		p("---|")
	}
	p("\n| req/s |")
	for _, s := range r.Sweep {
		p(" %.0f |", s.RPS)
	}
	p("\n\n")
	p("| bound | unloaded p99 | saturated req/s | offered req/s | sent | admitted (200) | rejected (429) | other | admitted p50 | admitted p99 | 429 p50 | 429 p90 | 429 p99 | 429 max |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	p("| %d | %s | %.0f | %.0f | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s |\n\n", r.Bound, ms(r.Unloaded.P99), r.SatRPS, r.Offered,
		r.Sent, r.Admitted, r.Rejected, r.Other, ms(r.AdmittedLat.P50), ms(r.AdmittedLat.P99), ms(r.RejectedLat.P50),
		ms(r.RejectedLat.P90), ms(r.RejectedLat.P99), ms(r.RejectedLat.Max))
	if r.FirstOther != "" {
		p("First other reply: %s\n\n", r.FirstOther)
	}
}

func progressOverload(w io.Writer, r *OverloadResult) {
	progress(w, "overload bound %d: unloaded p99 %s, saturated %.0f req/s, offered %.0f req/s: %d sent, %d admitted (p99 %s), %d rejected (p50 %s p99 %s, max %s), %d other%s",
		r.Bound, round(r.Unloaded.P99), r.SatRPS, r.Offered, r.Sent, r.Admitted, round(r.AdmittedLat.P99),
		r.Rejected, round(r.RejectedLat.P50), round(r.RejectedLat.P99), round(r.RejectedLat.Max), r.Other, errNote(0, r.FirstOther))
}
