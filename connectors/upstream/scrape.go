package upstream

import (
	"bufio"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// The worker's own load (routing.metrics_interval): vLLM's
// vllm:num_requests_running and vllm:num_requests_waiting from its GET
// /metrics. There is no timer: a pick that finds an endpoint's figures
// older than the interval starts one scrape in the background (at most one
// at a time per endpoint, bounded by metrics_timeout) and scores with what
// it has. So the scraping belongs to the client that is picking: a client a
// reload replaced stops scraping with its last pick, and nothing has to be
// shut down. Figures older than three intervals (a worker that stopped
// answering /metrics, or an endpoint idle for a while) are not used.

// scrapeMaxBody bounds what is read of one /metrics reply (vLLM's is tens
// of KiB).
const scrapeMaxBody = 4 << 20

// scraper reads the workers' /metrics for one pool.
type scraper struct {
	timeout time.Duration
	once    sync.Once
	hc      atomic.Pointer[http.Client]
}

func newScraper(timeout time.Duration) *scraper { return &scraper{timeout: timeout} }

// bind gives the scraper the client's transport (its TLS settings and
// keep-alive pool), once.
func (s *scraper) bind(rt http.RoundTripper) {
	s.once.Do(func() { s.hc.Store(&http.Client{Transport: rt, Timeout: s.timeout}) })
}

// loadFigures is one endpoint's last scrape.
type loadFigures struct {
	running, waiting atomic.Uint64 // float64 bits
	at               atomic.Int64  // unix ns of the last successful scrape, 0: none
	started          atomic.Int64  // unix ns of the last scrape started
	busy             atomic.Bool
	failing          atomic.Bool // the last scrape failed (logged once per streak)
}

// figures are the running and waiting requests when scraped within three
// intervals of now.
func (f *loadFigures) figures(now int64, interval time.Duration) (running, waiting float64, ok bool) {
	at := f.at.Load()
	if at == 0 || now-at > 3*int64(interval) {
		return 0, 0, false
	}
	return math.Float64frombits(f.running.Load()), math.Float64frombits(f.waiting.Load()), true
}

// refresh starts a scrape of e when its last one started an interval ago
// or more and none is running.
func (s *scraper) refresh(e *endpoint, now int64) {
	hc := s.hc.Load()
	if hc == nil {
		return
	}
	f := &e.scraped
	if now-f.started.Load() < int64(e.pool.routing.MetricsInterval) || !f.busy.CompareAndSwap(false, true) {
		return
	}
	f.started.Store(now)
	go func() {
		defer f.busy.Store(false)
		r, w, err := scrapeLoad(hc, e.base+"/metrics", s.timeout)
		if err != nil {
			if !f.failing.Swap(true) {
				logrus.WithFields(logrus.Fields{"pool": string(e.pool.role), "endpoint": e.ep.URL}).WithError(err).
					Warn("worker /metrics scrape failed: its load is in-flight legs only until a scrape succeeds")
			}
			return
		}
		if f.failing.Swap(false) {
			logrus.WithFields(logrus.Fields{"pool": string(e.pool.role), "endpoint": e.ep.URL}).
				Info("worker /metrics scrape succeeds again")
		}
		f.running.Store(math.Float64bits(r))
		f.waiting.Store(math.Float64bits(w))
		f.at.Store(e.pool.now().UnixNano())
	}()
}

// scrapeLoad GETs url and sums vLLM's running and waiting gauges over their
// series (one per engine and model).
func scrapeLoad(hc *http.Client, url string, timeout time.Duration) (running, waiting float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return 0, 0, &scrapeError{status: resp.StatusCode}
	}
	return parseLoad(io.LimitReader(resp.Body, scrapeMaxBody))
}

type scrapeError struct{ status int }

func (e *scrapeError) Error() string { return "GET /metrics answered HTTP " + strconv.Itoa(e.status) }

// Names of vLLM's load gauges.
const (
	metricRunning = "vllm:num_requests_running"
	metricWaiting = "vllm:num_requests_waiting"
)

// parseLoad reads Prometheus text exposition and sums the samples of the
// two gauges. A reply with neither is an error: the endpoint is not a vLLM
// (or does not expose them), and its load stays in-flight legs only.
func parseLoad(r io.Reader) (running, waiting float64, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	seen := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		var dst *float64
		switch {
		case strings.HasPrefix(line, metricRunning) && sampleAfter(line, len(metricRunning)):
			dst = &running
		case strings.HasPrefix(line, metricWaiting) && sampleAfter(line, len(metricWaiting)):
			dst = &waiting
		default:
			continue
		}
		v, ok := sampleValue(line)
		if !ok {
			continue
		}
		*dst += v
		seen = true
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !seen {
		return 0, 0, errNoLoadGauges
	}
	return running, waiting, nil
}

var errNoLoadGauges = &noGaugesError{}

type noGaugesError struct{}

func (*noGaugesError) Error() string {
	return "no " + metricRunning + " or " + metricWaiting + " sample in the reply"
}

// sampleAfter: the metric name ends at i (labels or the value follow), so
// vllm:num_requests_running_total is not taken for the gauge.
func sampleAfter(line string, i int) bool {
	return i < len(line) && (line[i] == '{' || line[i] == ' ' || line[i] == '\t')
}

// sampleValue is the value of a sample line: the first field after the
// labels (a timestamp may follow it).
func sampleValue(line string) (float64, bool) {
	rest := line
	if i := strings.LastIndexByte(line, '}'); i >= 0 {
		rest = line[i+1:]
	} else if i := strings.IndexAny(line, " \t"); i >= 0 {
		rest = line[i:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || math.IsNaN(v) || v < 0 {
		return 0, false
	}
	return v, true
}
