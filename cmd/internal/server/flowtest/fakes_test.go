package flowtest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"
)

// leg is one call a fake received.
type leg struct {
	seq           int    // arrival order, from 0
	kind          string // see legKinds; "unknown" when the headers name no role
	target        string // fake name: render, gateway, media, prefill0…
	pool          string // direct mode: the role of the endpoint's pool
	method, path  string
	header        http.Header
	contentLength int64
	body          []byte
	status        int // the status the fake answered
	// start is when the request arrived, end when the fake's handler
	// returned: the leg was in flight in between.
	start, end time.Time
}

// fakes are the httptest servers of one case and what they received.
type fakes struct {
	c *flowCase

	mu       sync.Mutex
	legs     []*leg
	used     map[*replySpec]bool
	inflight int
	changed  time.Time // last arrival or completion

	servers []*httptest.Server
	// urls maps each fake's base URL to its name, for normalisation.
	urls map[string]string

	render, gateway, media string // base URLs ("" when absent)
	pools                  map[string][]poolEP
}

type poolEP struct {
	url, name     string
	bootstrapPort int
}

// startFakes starts render, media, and the gateway or one server per pool
// endpoint, all on 127.0.0.1.
func startFakes(c *flowCase) *fakes {
	f := &fakes{c: c, used: map[*replySpec]bool{}, urls: map[string]string{}, changed: time.Now()}
	f.render = f.serve("render", f.worker("render", ""))
	if len(c.Media) > 0 {
		f.media = f.serve("media", http.HandlerFunc(f.serveMedia))
	}
	if c.Upstream.Mode == "direct" {
		f.pools = map[string][]poolEP{}
		for _, role := range poolOrder(c.Upstream.Pools) {
			for i, ep := range c.Upstream.Pools[role] {
				name := fmt.Sprintf("%s%d", role, i)
				u := f.serve(name, f.worker(name, role))
				f.pools[role] = append(f.pools[role], poolEP{url: u, name: name, bootstrapPort: ep.BootstrapPort})
			}
		}
	} else {
		f.gateway = f.serve("gateway", f.worker("gateway", ""))
	}
	return f
}

func (f *fakes) serve(name string, h http.Handler) string {
	s := httptest.NewServer(modelsApart(h))
	f.servers = append(f.servers, s)
	f.urls[s.URL] = name
	return s.URL
}

func (f *fakes) close() {
	for _, s := range f.servers {
		s.CloseClientConnections()
		s.Close()
	}
}

// record reads the request and adds it as a leg.
func (f *fakes) record(r *http.Request, target, pool string) *leg {
	body, _ := io.ReadAll(r.Body)
	l := &leg{target: target, pool: pool, method: r.Method, path: r.URL.RequestURI(),
		header: r.Header.Clone(), contentLength: r.ContentLength, body: body}
	l.header.Del("Content-Length")
	l.kind = kindOf(target, r.Header)
	f.mu.Lock()
	l.start = time.Now()
	l.seq = len(f.legs)
	f.legs = append(f.legs, l)
	f.inflight++
	f.changed = time.Now()
	f.mu.Unlock()
	return l
}

func (f *fakes) done(l *leg) {
	f.mu.Lock()
	l.end = time.Now()
	f.inflight--
	f.changed = time.Now()
	f.mu.Unlock()
}

// kindOf classifies a leg: by fake for render and media, by EPP-Profile
// (plus Prefer for conditional decode) for worker targets.
func kindOf(target string, h http.Header) string {
	switch target {
	case "render", "media":
		return target
	}
	switch p := h.Get("Epp-Profile"); p {
	case "encode", "prefill":
		return p
	case "decode":
		if h.Get("Prefer") != "" {
			return "conditional-decode"
		}
		return p
	}
	return "unknown"
}

// worker serves render or worker legs from the scripted replies.
func (f *fakes) worker(target, pool string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := f.record(r, target, pool)
		defer f.done(l)
		rep := f.pick(l)
		status := -1 // cancelled before the reply
		if writeReply(w, r, rep) {
			status = rep.Status
			if rep.Hangup {
				status = 0
			}
		}
		f.mu.Lock()
		l.status = status
		f.mu.Unlock()
	})
}

// unscripted answers a leg no reply matches.
var unscripted = &replySpec{Status: 500, Body: `{"error":{"message":"flowtest: no scripted reply for this leg"}}`}

// pick returns the first unused reply matching the leg, else the last
// matching one (retries repeat it), else unscripted.
func (f *fakes) pick(l *leg) *replySpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	var last *replySpec
	for _, r := range f.c.Replies {
		if r.Leg != l.kind || (r.Endpoint != "" && r.Endpoint != l.target) ||
			(r.Contains != "" && !strings.Contains(string(l.body), r.Contains)) {
			continue
		}
		if !f.used[r] {
			f.used[r] = true
			return r
		}
		last = r
	}
	if last != nil {
		return last
	}
	return unscripted
}

// writeReply answers as scripted; false when the request was cancelled
// before the status was written.
func writeReply(w http.ResponseWriter, r *http.Request, rep *replySpec) bool {
	if !sleep(r, rep.delay) {
		return false
	}
	if rep.Hangup {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return true
	}
	h := w.Header()
	for _, kv := range rep.Headers {
		h.Add(kv[0], kv[1])
	}
	if h.Get("Content-Type") == "" {
		switch {
		case len(rep.Chunks) > 0:
			h.Set("Content-Type", "text/event-stream")
		case rep.Body != "":
			h.Set("Content-Type", "application/json")
		}
	}
	if rep.Gzip {
		h.Set("Content-Encoding", "gzip")
	}
	w.WriteHeader(rep.Status)
	if len(rep.Chunks) == 0 {
		_, _ = w.Write(replyBody(rep))
		return true
	}
	rc := http.NewResponseController(w)
	for i, ch := range rep.Chunks {
		if i > 0 && !sleep(r, rep.chunkDelay) {
			return true
		}
		_, _ = io.WriteString(w, ch)
		_ = rc.Flush()
	}
	return true
}

// sleep waits d unless the request is cancelled first.
func sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// replyBody is the scripted body, gzipped when asked (deterministic: no
// name, no modification time).
func replyBody(rep *replySpec) []byte {
	if !rep.Gzip {
		return []byte(rep.Body)
	}
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	_, _ = io.WriteString(z, rep.Body)
	_ = z.Close()
	return b.Bytes()
}

func (f *fakes) serveMedia(w http.ResponseWriter, r *http.Request) {
	l := f.record(r, "media", "")
	defer f.done(l)
	m, ok := f.c.Media[r.URL.Path]
	status := 200
	if !ok {
		status = 404
	}
	f.mu.Lock()
	l.status = status
	f.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	data, err := base64.StdEncoding.DecodeString(m.Base64)
	if err != nil {
		http.Error(w, "bad base64 in case.yaml", 500)
		return
	}
	if m.Type != "" {
		w.Header().Set("Content-Type", m.Type)
	}
	_, _ = w.Write(data)
}

// settle waits until at least min legs arrived, none is in flight, and
// nothing changed for a short quiet period; bounded by limit.
func (f *fakes) settle(min int, limit time.Duration) []*leg {
	const quiet = 30 * time.Millisecond
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		f.mu.Lock()
		ok := len(f.legs) >= min && f.inflight == 0 && time.Since(f.changed) >= quiet
		f.mu.Unlock()
		if ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*leg(nil), f.legs...)
}

// poolOrder is the roles' pools, then the named ones by name.
func poolOrder(pools map[string][]endpointSpec) []string {
	out := []string{"encode", "prefill", "decode"}
	var named []string
	for p := range pools {
		if p != "encode" && p != "prefill" && p != "decode" {
			named = append(named, p)
		}
	}
	sort.Strings(named)
	return append(out, named...)
}

// modelsApart answers GET /v1/models itself, outside the recorded legs: a
// direct-mode client asks its decode and named pools for their model list
// in the background (which models are LoRA adapters, for the cache key) at
// a moment of its own, so it is no leg of the case's request. The fakes
// list no adapter.
func modelsApart(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		h.ServeHTTP(w, r)
	})
}
