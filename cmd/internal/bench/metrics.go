package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// handover is celflow's hand-over histogram (celflow_handover_seconds:
// prefill answer received → decode request on the wire, docs/benchmarks.md) as
// read from /metrics: a sum, a count and the count at or under 0.2 ms
// (the hand-over target, one of the histogram's bucket bounds).
type handover struct {
	Sum      float64 // seconds
	Count    float64
	Within02 float64 // observations ≤ 0.2 ms
}

func (h handover) sub(o handover) handover {
	return handover{h.Sum - o.Sum, h.Count - o.Count, h.Within02 - o.Within02}
}

func (h handover) add(o handover) handover {
	return handover{h.Sum + o.Sum, h.Count + o.Count, h.Within02 + o.Within02}
}

// Mean is the mean hand-over (0 with no observations).
func (h handover) Mean() time.Duration {
	if h.Count <= 0 {
		return 0
	}
	return time.Duration(h.Sum / h.Count * 1e9)
}

// scrapeHandover reads celflow's /metrics.
func scrapeHandover(c *http.Client, base string) (handover, error) {
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return handover{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return handover{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return handover{}, err
	}
	return parseHandover(b), nil
}

// parseHandover picks the hand-over series out of Prometheus text; absent
// series read as zero.
func parseHandover(b []byte) handover {
	var h handover
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "celflow_handover_seconds") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "celflow_handover_seconds_sum":
			h.Sum = v
		case "celflow_handover_seconds_count":
			h.Count = v
		case `celflow_handover_seconds_bucket{le="0.0002"}`:
			h.Within02 = v
		}
	}
	return h
}
