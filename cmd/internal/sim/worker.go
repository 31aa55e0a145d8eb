package sim

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Config configures a worker. The zero value of each field takes the default
// noted beside it.
type Config struct {
	Name            string        // in records and engine ids; default "sim"
	Roles           []Role        // default: all four
	Model           string        // answered when the request names none; default "sim-model"
	TTFT, ITL       time.Duration // time to first token, inter-token latency
	OutputTokens    int           // natural answer length; default 16
	SharedDir       string        // kv-shared-storage dir; default $TMPDIR/celflow-sim-kv
	Faults          []Fault       // injected on every matching request
	PrefixCacheSize int           // KV cache capacity in blocks (and prompt tails); default 4096
	BlockSize       int           // KV block size in tokens; default 16, as vLLM's
	PrefillPerToken time.Duration // added to TTFT per uncached prompt token (not for a decode pulling KV)
	RecordLimit     int           // records kept; default 1024
	RecordBodyLimit int           // bytes of a body kept in a record; default 1 MiB
	// BootstrapWait bounds how long an SGLang prefill waits for its decode
	// to join the room; 0 answers at once (a prefill that answers early).
	BootstrapWait time.Duration
	KVLease       time.Duration // how long produced KV stays pullable; default 30s
	Advertise     string        // host:port peers reach this worker on; default the local address of each request
	// Deterministic answers every request in the continuable deterministic
	// mode (determ.go); without it only temperature-0 requests are.
	Deterministic bool
	// LoRA are the adapters served besides Model (lora.go).
	LoRA []LoRAModule
}

// maxBody caps request bodies; generate bodies with kwargs_data can be large.
const maxBody = 256 << 20

// Worker is a simulated vLLM worker (and render service): an http.Handler.
type Worker struct {
	cfg    Config
	roles  map[Role]bool
	mux    *http.ServeMux
	rec    *Recorder
	cache  *KVCache
	prefix *PrefixCache // the Prefer: if-available view of cache
	met    *simMetrics
	faults *faultSet
	kv     *leaseStore[kvEntry]
	ec     *leaseStore[int]
	rooms  rooms
	kvPub  *kvPublisher // nil: no KV events
	// joinWait bounds how long a joining decode waits for its prefill
	// (roomJoinWait; tests shorten it).
	joinWait time.Duration
}

var _ http.Handler = (*Worker)(nil)

// NewWorker builds a worker from cfg.
func NewWorker(cfg Config) (*Worker, error) {
	if cfg.Name == "" {
		cfg.Name = "sim"
	}
	if len(cfg.Roles) == 0 {
		cfg.Roles = AllRoles
	}
	if cfg.Model == "" {
		cfg.Model = "sim-model"
	}
	if cfg.OutputTokens <= 0 {
		cfg.OutputTokens = 16
	}
	if cfg.SharedDir == "" {
		cfg.SharedDir = filepath.Join(os.TempDir(), "celflow-sim-kv")
	}
	if cfg.PrefixCacheSize <= 0 {
		cfg.PrefixCacheSize = 4096
	}
	if cfg.RecordLimit <= 0 {
		cfg.RecordLimit = 1024
	}
	if cfg.RecordBodyLimit <= 0 {
		cfg.RecordBodyLimit = 1 << 20
	}
	if cfg.KVLease <= 0 {
		cfg.KVLease = 30 * time.Second
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.TTFT < 0 || cfg.ITL < 0 || cfg.PrefillPerToken < 0 {
		return nil, fmt.Errorf("ttft, itl and prefill-per-token must not be negative")
	}
	cache := NewKVCache(cfg.PrefixCacheSize, cfg.BlockSize)
	w := &Worker{
		cfg: cfg, roles: map[Role]bool{}, mux: http.NewServeMux(),
		rec: NewRecorder(cfg.RecordLimit, cfg.RecordBodyLimit), cache: cache, prefix: &PrefixCache{kv: cache}, met: newSimMetrics(cfg.Model, cache),
		faults: newFaultSet(cfg.Faults), kv: newLeaseStore[kvEntry](cfg.KVLease, 8192), ec: newLeaseStore[int](cfg.KVLease, 8192),
		joinWait: roomJoinWait,
	}
	for _, r := range cfg.Roles {
		if !r.valid() {
			return nil, fmt.Errorf("unknown role %q", r)
		}
		w.roles[r] = true
	}
	w.mux.HandleFunc("POST /v1/chat/completions", w.handle(w.infer(fmtChat)))
	w.mux.HandleFunc("POST /v1/completions", w.handle(w.infer(fmtCompletions)))
	w.mux.HandleFunc("POST /inference/v1/generate", w.handle(w.infer(fmtGenerate)))
	w.mux.HandleFunc("POST /v1/chat/completions/render", w.handle(w.render(fmtChat)))
	w.mux.HandleFunc("POST /v1/completions/render", w.handle(w.render(fmtCompletions)))
	w.mux.HandleFunc("GET /sim/kv/{id}", w.serveKV)
	w.mux.HandleFunc("GET /sim/ec/{hash}", w.serveEC)
	w.mux.HandleFunc("POST /sim/bootstrap/{room}", w.serveJoin)
	w.mux.Handle("/sim/records", w.rec)
	w.mux.HandleFunc("POST /sim/cache/probe", w.serveCacheProbe) // cacheprobe.go
	w.mux.HandleFunc("GET /health", func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
	w.mux.HandleFunc("GET /v1/models", w.models)
	w.mux.Handle("GET /metrics", w.met.handler())
	w.mux.HandleFunc("GET /sim/kv-events", w.serveKVEvents)
	return w, nil
}

// PublishKVEvents starts publishing the KV cache's changes (kvevents.go).
// Close stops it.
func (w *Worker) PublishKVEvents(cfg KVEventsConfig) error {
	p, err := startKVPublisher(cfg)
	if err != nil {
		return err
	}
	w.kvPub = p
	w.cache.publishTo(p, cfg.HashSeed)
	return nil
}

// Close stops what the worker runs beside its handler (the KV event
// publisher).
func (w *Worker) Close() {
	if w.kvPub != nil {
		w.cache.publishTo(nil, 0)
		w.kvPub.Close()
	}
}

// serveKVEvents says where the KV events are published (the bound
// addresses, so a test that asked for port 0 can subscribe).
func (w *Worker) serveKVEvents(rw http.ResponseWriter, _ *http.Request) {
	if w.kvPub == nil {
		writeError(rw, http.StatusNotFound, "this worker publishes no KV events")
		return
	}
	writeJSON(rw, http.StatusOK, map[string]string{"endpoint": w.kvPub.endpoint, "replay": w.kvPub.replay, "topic": w.kvPub.cfg.Topic})
}

// ServeHTTP routes a request.
func (w *Worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) { w.mux.ServeHTTP(rw, r) }

// Records is the worker's request log.
func (w *Worker) Records() *Recorder { return w.rec }

// PrefixCache is the worker's prefix cache (decode role).
func (w *Worker) PrefixCache() *PrefixCache { return w.prefix }

// KVCache is the worker's KV cache (the blocks behind PrefixCache).
func (w *Worker) KVCache() *KVCache { return w.cache }

// Config is the worker's effective configuration.
func (w *Worker) Config() Config { return w.cfg }

func (w *Worker) models(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]any{"object": "list", "data": w.modelCards()})
}

// call is one request in flight.
type call struct {
	rw       *statusWriter
	r        *http.Request
	body     []byte
	start    time.Time
	log      *Recorder
	rec      *Record
	role     Role
	req      *request // worker endpoints: the parsed body, nil when invalid
	fault    Fault
	cache    string
	cached   int  // prompt tokens the KV cache held (usage cached_tokens)
	complete bool // the reply was written in full
}

// handle wraps an endpoint: it reads and records the body, echoes
// x-request-id as vLLM's --enable-request-id-headers does, and completes the
// record when the endpoint returns (status, cancelled, duration).
func (w *Worker) handle(serve func(*call)) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxBody))
		sw := &statusWriter{ResponseWriter: rw}
		c := &call{rw: sw, r: r, body: body, start: start, log: w.rec, rec: w.rec.add(w.cfg.Name, r, body)}
		defer func() { c.finalize(sw.status) }()
		if id := r.Header.Get("X-Request-Id"); id != "" {
			rw.Header().Set("X-Request-Id", id)
		}
		if err != nil {
			c.fail(http.StatusBadRequest, "reading the body: "+err.Error())
			return
		}
		serve(c)
	}
}

// finalize completes the record. It runs just before the last byte of a
// whole reply is written, so a client that reads the records right after
// its reply sees them final, and again when the handler returns (which
// corrects the record if that last write failed).
func (c *call) finalize(status int) {
	c.log.update(c.rec, func(x *Record) {
		x.Role, x.Fault, x.Cache = c.role, c.fault.String(), c.cache
		x.Status, x.Done = status, true
		x.Cancelled = !c.complete && c.r.Context().Err() != nil
		x.DurationMS = float64(time.Since(c.start).Microseconds()) / 1000
	})
}

// fail answers status with an OpenAI-style error; the reply is whole.
func (c *call) fail(status int, msg string) {
	c.complete = true
	c.finalize(status)
	writeError(c.rw, status, msg)
}

// applyFaults plans the request's faults for c.role and plays the ones that
// act before any work. It reports whether the request goes on.
func (w *Worker) applyFaults(c *call) bool {
	f, err := w.faults.plan(c.role, c.r.Header.Get(FaultHeader))
	c.fault = f
	if err != nil {
		c.fail(http.StatusBadRequest, FaultHeader+": "+err.Error())
		return false
	}
	ctx := c.r.Context()
	if !sleep(ctx, f.Delay) {
		return false
	}
	if f.ResetBeforeHeaders {
		sleep(ctx, f.SlowHeaders)
		resetConn(c.rw, false)
		return false
	}
	if f.Status != 0 {
		if sleep(ctx, f.SlowHeaders) {
			c.fail(f.Status, fmt.Sprintf("simulated fault on %s %s: HTTP %d", c.role, w.cfg.Name, f.Status))
		}
		return false
	}
	return true
}

// workerRole picks the role of an inference request: EPP-Profile when sent
// (celflow sends it on every worker leg), else the KV flags of the body,
// else the first served of decode, prefill, encode.
func (w *Worker) workerRole(profile string, req *request) (Role, error) {
	if profile != "" {
		role := Role(strings.ToLower(strings.TrimSpace(profile)))
		if !role.isWorker() {
			return "", fmt.Errorf("EPP-Profile %q is not encode, prefill or decode", profile)
		}
		if !w.roles[role] {
			return role, fmt.Errorf("worker %s does not serve role %s (EPP-Profile); it serves %v", w.cfg.Name, role, w.cfg.Roles)
		}
		return role, nil
	}
	if req != nil && kvFlag(req.KV, "do_remote_decode") && w.roles[RolePrefill] {
		return RolePrefill, nil
	}
	for _, r := range []Role{RoleDecode, RolePrefill, RoleEncode} {
		if w.roles[r] {
			return r, nil
		}
	}
	return "", fmt.Errorf("worker %s serves no inference role (it serves %v)", w.cfg.Name, w.cfg.Roles)
}

// statusWriter remembers the status for the record. Unwrap lets
// http.ResponseController reach Flush and Hijack underneath.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
