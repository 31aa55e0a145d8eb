package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Record is one request a simulator received. Tests read records to assert
// what each leg carried (GET /sim/records).
type Record struct {
	Seq           int64       `json:"seq"`
	Time          time.Time   `json:"time"`
	Worker        string      `json:"worker"`
	Role          Role        `json:"role,omitempty"`
	Method        string      `json:"method"`
	Path          string      `json:"path"`
	Headers       http.Header `json:"headers"`
	Body          string      `json:"body"`
	BodyTruncated bool        `json:"body_truncated,omitempty"`
	Fault         string      `json:"fault,omitempty"`
	Upstream      string      `json:"upstream,omitempty"` // gateway: the member it went to
	Cache         string      `json:"cache,omitempty"`    // decode: hit or miss of the prefix cache
	Status        int         `json:"status"`
	Done          bool        `json:"done"`
	Cancelled     bool        `json:"cancelled"`
	DurationMS    float64     `json:"duration_ms"`
}

// RecordsPage is the reply of GET /sim/records?since=N: the records whose
// seq is greater than N, oldest first; Next is the seq to pass next time.
type RecordsPage struct {
	Records []Record `json:"records"`
	Next    int64    `json:"next"`
}

// Recorder is a bounded ring of records. Each record is added when its
// request arrives and completed when the handler returns.
type Recorder struct {
	mu      sync.Mutex
	ring    []*Record
	start   int // index of the oldest record
	seq     int64
	limit   int
	bodyCap int
}

// NewRecorder keeps the last limit records, bodies cut at bodyCap bytes.
func NewRecorder(limit, bodyCap int) *Recorder {
	return &Recorder{limit: max(limit, 1), bodyCap: max(bodyCap, 0)}
}

// add records a request and returns its record; fill it only through the
// Recorder's methods once added, because readers copy it under the lock.
func (r *Recorder) add(worker string, req *http.Request, body []byte) *Record {
	rec := &Record{
		Time: time.Now(), Worker: worker, Method: req.Method, Path: req.URL.Path,
		Headers: req.Header.Clone(),
	}
	if len(body) > r.bodyCap {
		body, rec.BodyTruncated = body[:r.bodyCap], true
	}
	rec.Body = string(body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	rec.Seq = r.seq
	if len(r.ring) < r.limit {
		r.ring = append(r.ring, rec)
	} else {
		r.ring[r.start] = rec
		r.start = (r.start + 1) % r.limit
	}
	return rec
}

// update changes a record under the lock.
func (r *Recorder) update(rec *Record, f func(*Record)) {
	r.mu.Lock()
	f(rec)
	r.mu.Unlock()
}

// Since returns copies of the records with seq > n, oldest first.
func (r *Recorder) Since(n int64) RecordsPage {
	r.mu.Lock()
	defer r.mu.Unlock()
	page := RecordsPage{Records: []Record{}, Next: max(n, 0)}
	for i := range r.ring {
		rec := r.ring[(r.start+i)%len(r.ring)]
		if rec.Seq > n {
			page.Records = append(page.Records, *rec)
			page.Next = rec.Seq
		}
	}
	return page
}

// Clear drops every record; sequence numbers keep growing.
func (r *Recorder) Clear() {
	r.mu.Lock()
	r.ring, r.start = nil, 0
	r.mu.Unlock()
}

// ServeHTTP serves GET /sim/records?since=N and DELETE /sim/records.
func (r *Recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.Method {
	case http.MethodGet:
		var since int64
		if s := req.URL.Query().Get("since"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				writeError(w, http.StatusBadRequest, "since: want an integer")
				return
			}
			since = v
		}
		writeJSON(w, http.StatusOK, r.Since(since))
	case http.MethodDelete:
		r.Clear()
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

// FetchRecords reads a simulator's records with seq > since. baseURL is the
// simulator's root ("http://127.0.0.1:PORT").
func FetchRecords(ctx context.Context, baseURL string, since int64) (RecordsPage, error) {
	var page RecordsPage
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/sim/records?since="+strconv.FormatInt(since, 10), nil)
	if err != nil {
		return page, err
	}
	resp, err := controlClient.Do(req)
	if err != nil {
		return page, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return page, fmt.Errorf("GET /sim/records: HTTP %d", resp.StatusCode)
	}
	return page, json.NewDecoder(resp.Body).Decode(&page)
}

// ClearRecords empties a simulator's records.
func ClearRecords(ctx context.Context, baseURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, baseURL+"/sim/records", nil)
	if err != nil {
		return err
	}
	resp, err := controlClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("DELETE /sim/records: HTTP %d", resp.StatusCode)
	}
	return nil
}

// controlClient talks to simulators (records, KV pulls, bootstrap joins);
// it never uses the environment's proxies.
var controlClient = &http.Client{
	Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second},
	Timeout:   30 * time.Second,
}
