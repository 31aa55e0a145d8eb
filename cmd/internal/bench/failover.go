package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The failover cell (issue 19; `celflow-bench --only failover`): the stall
// a decode failover adds at the client. Real `celflow-sim` worker processes
// in their deterministic mode (one prefill, two decodes) behind `celflow
// serve` with decode `failover:` on, P/D and decode-only; each stream's
// decode leg is cut after k tokens (the simulator's cut-after fault, a
// seeded k), and the client times the gap from token k (the last before
// the cut: the worker's end comes right after it) to token k+1 (the first
// of the continuation). The target: at most one prefill plus 50 ms, the
// prefill being the prefill worker's time to first token on these settings.

// Failover settings of the simulators.
const (
	foPrefillTTFT = 30 * time.Millisecond
	foDecodeTTFT  = 10 * time.Millisecond
	foITL         = 10 * time.Millisecond
	foTokens      = 24
	foStreams     = 40 // per topology
	foSeed        = 19
)

// FailoverCell is one topology's measurement.
type FailoverCell struct {
	Topology   string
	Streams    int
	Errors     int
	Mismatches int  // assembled text differs from an unbroken run
	Stall      Dist // token k to token k+1 across the cut
	Gap        Dist // every other token-to-token gap of the same streams
	FirstError string
}

// Target is the stall target: one prefill (its time to first token on the
// simulator) plus 50 ms; decode-only has no prefill.
func (c FailoverCell) Target() time.Duration {
	if c.Topology == "pd" {
		return foPrefillTTFT + 50*time.Millisecond
	}
	return 50 * time.Millisecond
}

// MeasureFailover runs the cell. The simulator binary is celflow-sim beside
// o.Bin.
func MeasureFailover(ctx context.Context, o Options) ([]FailoverCell, error) {
	simBin := filepath.Join(filepath.Dir(o.Bin), "celflow-sim")
	if _, err := os.Stat(simBin); err != nil {
		return nil, fmt.Errorf("failover cell: %w (make build puts celflow-sim beside celflow)", err)
	}
	dir, err := os.MkdirTemp("", "celflow-bench-failover")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var out []FailoverCell
	for _, pd := range []bool{true, false} {
		c, err := failoverCell(ctx, o, simBin, dir, pd)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func failoverCell(ctx context.Context, o Options, simBin, dir string, pd bool) (FailoverCell, error) {
	cell := FailoverCell{Topology: "decode-only"}
	if pd {
		cell.Topology = "pd"
	}
	progress(o.Progress, "failover %s: %d streams, each cut once", cell.Topology, foStreams)
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	sim := func(name string, args ...string) (string, error) {
		addr, err := freeAddr()
		if err != nil {
			return "", err
		}
		u := "http://" + addr
		p, err := startProc(ctx, name, simBin, u, "/health", append([]string{"--listen", addr, "--name", name, "--deterministic"}, args...)...)
		if err != nil {
			return "", err
		}
		procs = append(procs, p)
		return u, nil
	}
	var pools strings.Builder
	pools.WriteString("  mode: direct\n  pools:\n")
	if pd {
		u, err := sim("p0", "--roles", "prefill", "--ttft", foPrefillTTFT.String())
		if err != nil {
			return cell, err
		}
		fmt.Fprintf(&pools, "    prefill: [%q]\n", u)
	}
	var decodes []string
	for _, n := range []string{"d0", "d1"} {
		u, err := sim(n, "--roles", "decode", "--ttft", foDecodeTTFT.String(), "--itl", foITL.String(), "--output-tokens", "64")
		if err != nil {
			return cell, err
		}
		decodes = append(decodes, fmt.Sprintf("%q", u))
	}
	fmt.Fprintf(&pools, "    decode: [%s]\n", strings.Join(decodes, ", "))
	wf := "\n  apiVersion: celflow/v1\n  kind: Workflow\n  metadata: {name: bench-failover}\n  routes: [chat]\n  defaults: {kv_connector: kv-nixl}\n  nodes:\n"
	needs := ""
	if pd {
		wf += "    - id: prefill\n      type: prefill\n"
		needs = "      needs: [prefill]\n"
	}
	wf += "    - id: decode\n      type: decode\n" + needs + "      params: {failover: {attempts: 2}}\n"
	addr, err := freeAddr()
	if err != nil {
		return cell, err
	}
	cfg := fmt.Sprintf("server: {listen: %q, drain_delay: 0s, shutdown_timeout: 2s}\nupstream:\n%s"+
		"telemetry: {log_level: warn, log_format: json, tracing: {enabled: false}}\nworkflow:%s", addr, pools.String(), wf)
	path := filepath.Join(dir, "serve-failover-"+cell.Topology+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return cell, err
	}
	p, err := startProc(ctx, "celflow", o.Bin, "http://"+addr, "/readyz", "serve", "--config", path)
	if err != nil {
		return cell, err
	}
	procs = append(procs, p)
	url := "http://" + addr + "/v1/chat/completions"
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	rng := rand.New(rand.NewPCG(foSeed, foSeed))
	var stalls, gaps []time.Duration
	want := map[int]string{}
	for i := range foStreams {
		prompt := i % 4
		if _, ok := want[prompt]; !ok {
			text, _, err := failoverStream(ctx, c, url, prompt, "")
			if err != nil {
				return cell, fmt.Errorf("failover %s: unbroken run: %w", cell.Topology, err)
			}
			want[prompt] = text
		}
		k := 2 + rng.IntN(foTokens-4)
		text, at, err := failoverStream(ctx, c, url, prompt, fmt.Sprintf("decode:cut-after=%d", k))
		cell.Streams++
		if err != nil || len(at) <= k {
			cell.Errors++
			if cell.FirstError == "" {
				cell.FirstError = fmt.Sprintf("%v (%d tokens)", err, len(at))
			}
			continue
		}
		if text != want[prompt] {
			cell.Mismatches++
		}
		for j := 1; j < len(at); j++ {
			if j == k {
				stalls = append(stalls, at[j]-at[j-1])
			} else {
				gaps = append(gaps, at[j]-at[j-1])
			}
		}
	}
	cell.Stall, cell.Gap = Summarise(stalls), Summarise(gaps)
	return cell, nil
}

// failoverStream reads one greedy chat stream and returns its text and the
// arrival time of each content chunk, from the request's start.
func failoverStream(ctx context.Context, c *http.Client, url string, prompt int, fault string) (string, []time.Duration, error) {
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"bench failover %d: a story"}],"max_tokens":%d,"temperature":0,"stream":true}`, prompt, foTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if fault != "" {
		req.Header.Set("X-Sim-Fault", fault)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	var text strings.Builder
	var at []time.Duration
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		d, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if string(d) == "[DONE]" {
			done = true
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(d, &ch); err != nil {
			return "", nil, err
		}
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			at = append(at, time.Since(start))
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := sc.Err(); err != nil {
		return "", nil, err
	}
	if !done {
		return "", nil, fmt.Errorf("the stream ended without [DONE]")
	}
	return text.String(), at, nil
}

// Markers of the failover section: `celflow-bench --only failover --out F`
// rewrites it in F, and a full run keeps it (as the Go micro-benchmarks').
const (
	failoverBegin = "<!-- failover-begin -->"
	failoverEnd   = "<!-- failover-end -->"
)

// renderFailover is the failover section, markers included.
func renderFailover(w io.Writer, cells []FailoverCell, m Machine) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("%s\n## Failover stall\n\n", failoverBegin)
	p("`celflow-bench --only failover --out docs/benchmarks.md` (a full run keeps this section). Real `celflow-sim`\n")
	p("processes in their deterministic mode behind `celflow serve` with decode `failover: {attempts: 2}`: one\n")
	p("prefill (time to first token %s) and two decodes (%s to first token, %s between tokens), %d greedy\n", foPrefillTTFT, foDecodeTTFT, foITL, foStreams)
	p("chat streams of %d tokens one after another per topology, each decode leg cut after a seeded k tokens\n", foTokens)
	p("(the simulator's `cut-after`: the worker aborts the connection as a killed one would). *Stall* is the\n")
	p("client's gap from token k to token k+1 (the cut to the continuation's first token: a fresh prefill on\n")
	p("P/D, then a decode); *gap* every other token-to-token gap of the same streams. Target: one prefill\n")
	p("plus 50 ms. Machine: %d CPUs, %s.\n\n", m.CPUs, m.Model)
	p("| topology | streams | errors | text ≠ unbroken | stall p50 | stall p99 | stall max | gap p50 | target | result |\n")
	p("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cells {
		verdict := "met"
		if c.Errors > 0 || c.Mismatches > 0 || c.Stall.P99 > c.Target() {
			verdict = "not met"
		}
		p("| %s | %d | %d | %d | %s | %s | %s | %s | ≤ %s | %s |\n", c.Topology, c.Streams, c.Errors, c.Mismatches,
			ms(c.Stall.P50), ms(c.Stall.P99), ms(c.Stall.Max), ms(c.Gap.P50), ms(c.Target()), verdict)
	}
	for _, c := range cells {
		if c.FirstError != "" {
			p("\n%s: first error: %s\n", c.Topology, c.FirstError)
		}
	}
	p("\n%s", failoverEnd)
}

// extractFailover returns the failover section of a report, markers
// included ("" when absent).
func extractFailover(doc string) string {
	i := strings.Index(doc, failoverBegin)
	j := strings.Index(doc, failoverEnd)
	if i < 0 || j < i {
		return ""
	}
	return doc[i : j+len(failoverEnd)]
}

// writeFailover puts section into the report at out: in place of the
// previous one, else before the Go micro-benchmarks, else at the end.
func writeFailover(out, section string) error {
	prev, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(prev)
	switch old := extractFailover(doc); {
	case old != "":
		doc = strings.Replace(doc, old, section, 1)
	case strings.Contains(doc, goBenchBegin):
		doc = strings.Replace(doc, goBenchBegin, section+"\n\n"+goBenchBegin, 1)
	default:
		doc += "\n" + section + "\n"
	}
	return os.WriteFile(out, []byte(doc), 0o644)
}
