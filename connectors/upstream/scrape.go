package upstream

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// scrapeMaxBody bounds what is read of one /metrics reply. vLLM's is tens
// of KiB (about 300 series per model and engine). The library's parser
// holds every series of the page, about 50 times the page's size for a
// page of tiny series (200 MiB for 4 MiB), so the bound is what bounds a
// scrape's memory: 1 MiB, still tens of times a real page.
const scrapeMaxBody = 1 << 20

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
	// The text format parseLoad reads (vLLM's default too; an exporter
	// that would answer OpenMetrics or protobuf is asked for this one).
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return 0, 0, &scrapeError{status: resp.StatusCode}
	}
	return parseLoad(resp.Body)
}

type scrapeError struct{ status int }

func (e *scrapeError) Error() string { return "GET /metrics answered HTTP " + strconv.Itoa(e.status) }

// Names of vLLM's load gauges.
const (
	metricRunning = "vllm:num_requests_running"
	metricWaiting = "vllm:num_requests_waiting"
)

// parseLoad reads the Prometheus text exposition of a worker's /metrics
// with the Prometheus library's own parser (expfmt) and sums the samples of
// the two gauges over their series (one per engine and model_name). A
// sample whose value is NaN or negative is left out. A reply with neither
// gauge is an error: the endpoint is not a vLLM (or does not expose them),
// and its load stays in-flight legs only. So is a page the library refuses
// (its error names the line), and a page longer than scrapeMaxBody: a
// truncated page could end inside a sample's value, and the parser's
// memory grows with the page.
func parseLoad(r io.Reader) (running, waiting float64, err error) {
	br := &boundedReader{r: r, left: scrapeMaxBody}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(br)
	if br.over {
		return 0, 0, errPageTooLarge
	}
	if err != nil {
		return 0, 0, err
	}
	running, okR := sumGauge(families[metricRunning])
	waiting, okW := sumGauge(families[metricWaiting])
	if !okR && !okW {
		return 0, 0, errNoLoadGauges
	}
	return running, waiting, nil
}

// sumGauge sums the family's samples; ok is false when it has none taken.
// vLLM declares both as gauges; a page without TYPE lines has them untyped.
func sumGauge(mf *dto.MetricFamily) (sum float64, ok bool) {
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		var v float64
		switch {
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		case m.Untyped != nil:
			v = m.Untyped.GetValue()
		case m.Counter != nil:
			v = m.Counter.GetValue()
		default:
			continue
		}
		if math.IsNaN(v) || v < 0 {
			continue
		}
		sum += v
		ok = true
	}
	return sum, ok
}

// boundedReader reads at most left bytes of r and notes a page longer than
// that (the parser then sees an early end and fails; parseLoad reports the
// size instead).
type boundedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than the bound tells a page that ends exactly at
		// it from a longer one.
		var one [1]byte
		n, err := io.ReadFull(b.r, one[:])
		if n > 0 {
			b.over = true
			return 0, errPageTooLarge
		}
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

var errPageTooLarge = errors.New("the /metrics page is longer than " + strconv.Itoa(scrapeMaxBody>>20) + " MiB")

var errNoLoadGauges = &noGaugesError{}

type noGaugesError struct{}

func (*noGaugesError) Error() string {
	return "no " + metricRunning + " or " + metricWaiting + " sample in the reply"
}
