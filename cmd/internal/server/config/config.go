// Package config loads the serve config: one YAML file validated by an
// embedded JSON Schema (strict, every problem at once, each at its
// file:line:col), with every key overridable by an environment variable
// CELFLOW_<PATH> (the variable names itself in errors), and documented
// defaults for whatever neither sets.
package config

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/celflow/celflow/connectors/kvevents"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/internal/telemetry"
	"github.com/celflow/celflow/internal/tlsfiles"
	"github.com/celflow/celflow/schema"
)

// ID is the $id of the serve config schema (`celflow schema config`).
const ID = schema.Base + "config.json"

//go:embed config.json
var schemaJSON []byte

func init() {
	if err := schema.Register(ID, schemaJSON); err != nil {
		panic(err)
	}
}

// MiB is the unit of max_request_body_size.
const MiB = 1 << 20

// Config is a loaded, valid serve config.
type Config struct {
	File      string // the config file as given
	Server    Server
	Upstream  upstream.Config // zero fields take the upstream package's defaults
	Telemetry Telemetry
	Workflow  Workflow
	Async     Async // off unless async.redis_url is set
	Trust     Trust
	Admission Admission
	KVEvents  KVEvents // upstream.kv_events and the endpoints' kv_events/kv_replay (kvevents.go)

	doc     *schema.Doc
	errs    schema.Diagnostics // what Read found (Clean)
	fromEnv map[string]string  // pointer → the variable that set it
	prio    *celenv.Priority   // admission.priority, compiled by checkAdmission
}

// Server is the `server:` section.
type Server struct {
	Listen             string
	MaxRequestBodySize int64 // MiB
	ReadHeaderTimeout  time.Duration
	ReadTimeout        time.Duration
	WriteTimeout       time.Duration
	DrainDelay         time.Duration
	ShutdownTimeout    time.Duration
	TLS                tlsfiles.ServerConfig // server.tls; off unless Enabled
	MetricsListen      string                // "" = /metrics on the main listener
	MaxHeaderBytes     int
	MaxHeaderCount     int
	MaxConnections     int           // 0: derived from the fd limit (front.DefaultMaxConnections)
	ResetLimit         int           // early resets per address per ResetWindow; 0: off
	ResetWindow        time.Duration // the reset policy's sliding window
	ResetCooldown      time.Duration // how long an address over ResetLimit is refused
	// StreamWriteTimeout bounds one write of a streamed reply to the client
	// (server.stream_write_timeout); always above 0.
	StreamWriteTimeout time.Duration
}

// Trust is the `trust:` section (docs/threat-model.md).
type Trust struct {
	ClientFields []string // families of celflow-owned body fields clients may send
	OwnedHeaders []string // extra header names never forwarded from clients (also in Upstream.OwnedHeaders)
}

// MaxBodyBytes is the body cap in bytes (the schema bounds it to int64).
func (s Server) MaxBodyBytes() int64 { return s.MaxRequestBodySize * MiB }

// Telemetry is the `telemetry:` section.
type Telemetry struct {
	LogLevel  string // trace, debug, info, warn, error
	LogFormat string // json, text, or "" for json unless stderr is a terminal
	Tracing   telemetry.Config
}

// Workflow is where the workflow comes from: exactly one of Path (already
// resolved against the config file's directory) and Inline is set.
type Workflow struct {
	Path   string
	Inline *schema.Doc // the inline document, positions in the config file
}

// Defaults returns the documented defaults (docs/configuration.md):
// the one place they are set; decode starts from them for every section.
func Defaults() Config {
	return Config{
		Server: Server{
			Listen:             ":8080",
			MaxRequestBodySize: 64,
			ReadHeaderTimeout:  10 * time.Second,
			ReadTimeout:        30 * time.Second,
			WriteTimeout:       120 * time.Second,
			DrainDelay:         5 * time.Second,
			ShutdownTimeout:    25 * time.Second,
			TLS:                tlsfiles.ServerConfig{ReloadInterval: DefaultTLSReloadInterval},
			MaxHeaderBytes:     60 << 10,
			MaxHeaderCount:     100,
			ResetLimit:         500,
			ResetWindow:        10 * time.Second,
			ResetCooldown:      30 * time.Second,
			StreamWriteTimeout: 30 * time.Second,
		},
		Upstream: upstream.Config{
			Picker:              "round-robin",
			FailureThreshold:    upstream.DefaultFailureThreshold,
			EjectFor:            upstream.DefaultEjectFor,
			IdleConnTimeout:     upstream.DefaultIdleConnTimeout,
			MaxIdleConnsPerHost: upstream.DefaultMaxIdleConnsPerHost,
			PrefixBlockTokens:   upstream.DefaultPrefixBlockTokens,
			PrefixIndexSize:     upstream.DefaultPrefixIndexSize,
			TLS:                 tlsfiles.ClientConfig{ReloadInterval: DefaultTLSReloadInterval},

			// Each weight keeps its default when only the other is set.
			Routing: upstream.Routing{CacheWeight: upstream.DefaultCacheWeight, LoadWeight: upstream.DefaultLoadWeight},
		},
		Telemetry: Telemetry{LogLevel: "info"},
		Async: Async{
			Backend:        "builtin",
			KeyPrefix:      "celflow:async:",
			Queues:         []string{"default"},
			Tiers:          []string{"interactive", "async", "batch"},
			WaitTimeout:    60 * time.Second,
			WaitMax:        time.Hour,
			EnqueueTimeout: time.Hour,
			WaitCap:        60 * time.Second,
			MaxWaiters:     1000,
			FetchGrace:     60 * time.Second,
			ResultTTL:      24 * time.Hour,
			MaxDeliveries:  3,
			Lease:          30 * time.Second,
			PollInterval:   time.Second,
			MaxInlineBytes: 4 << 20,
			TenantBacklog:  10000,
			QueueBacklog:   100000,
			Dispatcher:     true,
			Concurrency:    16,
			Budget:         8,
		},
		Admission: Admission{QueueTimeout: DefaultQueueTimeout, RetryAfter: DefaultRetryAfter},
		KVEvents:  KVEvents{StaleAfter: kvevents.DefaultStaleAfter, MaxBlocksPerWorker: kvevents.DefaultMaxBlocksPerWorker},
	}
}

// LoadFile reads and loads a config file; getenv (os.Getenv, or a map in
// tests; nil for none) supplies the CELFLOW_* overrides. The Config is nil
// on any error (Read keeps it).
func LoadFile(path string, getenv func(string) string) (*Config, schema.Diagnostics) {
	return valid(Read(path, getenv))
}

// Load validates a config document after applying the environment, and
// returns every problem at once, sorted. The Config is nil on any error.
func Load(file string, data []byte, getenv func(string) string) (*Config, schema.Diagnostics) {
	return valid(decodeDoc(file, data, getenv))
}

// Read reads the config file once and decodes it as far as it goes: the
// diagnostics are those of the whole document (schema, environment, the
// checks beyond the schema, admission.priority's CEL), and the Config is
// nil only when the file cannot be read or is not YAML. With errors, a
// section is decoded leniently (a value of the wrong type leaves its
// default): build from it only when Clean says so. This is the one decoder
// of the serve config: Load and LoadFile are Read refusing any error.
func Read(path string, getenv func(string) string) (*Config, schema.Diagnostics) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, schema.Diagnostics{{File: path, Msg: "cannot read config: " + err.Error()}}
	}
	return decodeDoc(path, data, getenv)
}

func valid(c *Config, ds schema.Diagnostics) (*Config, schema.Diagnostics) {
	if ds.HasErrors() {
		return nil, ds
	}
	return c, ds
}

func decodeDoc(file string, data []byte, getenv func(string) string) (*Config, schema.Diagnostics) {
	doc, ds := schema.LoadYAML(file, data)
	if doc == nil {
		return nil, ds.Sort()
	}
	c := &Config{File: file, doc: doc}
	ds = append(ds, c.applyEnv(getenv)...)
	f := readDoc(doc) // typed, with positions; after the environment is applied
	c.decode(f)
	ds = append(ds, c.envDiags(append(append(schema.Validate(doc, ID, ""), c.check(f)...), c.checkAdmission(f)...))...)
	c.Admission.Priority = c.prio
	c.errs = ds
	return c, ds.Sort()
}

// Clean reports whether the loaded document holds no error at or under
// the top-level section (upstream, workflow, server, async, admission...),
// nor at its root (which may hide anything): whether what is built from
// that section can be trusted. A missing required section is not clean.
func (c *Config) Clean(section string) bool {
	if _, ok := c.doc.Value("/workflow"); !ok && section == "workflow" {
		return false // the schema reported the missing key
	}
	for _, d := range c.errs {
		if d.Severity != schema.Error {
			continue
		}
		if d.Path == "" || d.Path == section || strings.HasPrefix(d.Path, section+".") ||
			strings.HasPrefix(d.Path, section+"[") {
			return false
		}
	}
	return true
}

// Diag is an error with its rule at the config key ptr (a JSON pointer such
// as /async/redis_url): at its position in the file, or naming the variable
// that set it.
func (c *Config) Diag(ptr, rule, msg string) schema.Diagnostic {
	d := c.doc.Diag(ptr, schema.Error, msg).R(rule)
	if env := c.envFor(d.Path); env != "" {
		d.File, d.Line, d.Col = env, 0, 0
	}
	return d
}

// maxBodyMiB is the largest max_request_body_size whose byte count fits in
// an int64.
const maxBodyMiB = (1<<63 - 1) / MiB

// check adds what the schema cannot say clearly (after decode).
func (c *Config) check(f *fileDoc) schema.Diagnostics {
	ds := c.checkOps()
	ds = append(ds, c.checkKVEvents(f)...)
	if n := f.Server.MaxRequestBodySize; n.Set && n.V > maxBodyMiB {
		ds = append(ds, c.doc.Diag(n.Ptr, schema.Error,
			fmt.Sprintf("%d MiB overflows int64 bytes (at most %d)", n.V, int64(maxBodyMiB))).R(schema.RuleRange))
	}
	if w := f.Server.StreamWriteTimeout; w.Set && w.V == 0 {
		// There is no "off": a client that stops reading must not hold its
		// stream and its admission slot forever. (The schema refuses a
		// negative duration.)
		ds = append(ds, c.doc.Diag(w.Ptr, schema.Error,
			"must be above 0s: a stream whose client stops reading must end (default 30s)").R(schema.RuleRange))
	}
	return ds
}

// decode fills the typed config from the document, over the defaults:
// every section is decoded (leniently when the document has errors: a value
// of the wrong type keeps its default).
func (c *Config) decode(f *fileDoc) {
	d := Defaults()
	c.Server, c.Upstream, c.Telemetry, c.Async, c.Admission = d.Server, d.Upstream, d.Telemetry, d.Async, d.Admission
	c.KVEvents = d.KVEvents
	s, sd := &c.Server, &f.Server
	keep(&s.Listen, sd.Listen)
	keep(&s.MaxRequestBodySize, sd.MaxRequestBodySize)
	keep(&s.ReadHeaderTimeout, sd.ReadHeaderTimeout)
	keep(&s.ReadTimeout, sd.ReadTimeout)
	keep(&s.WriteTimeout, sd.WriteTimeout)
	keep(&s.DrainDelay, sd.DrainDelay)
	keep(&s.ShutdownTimeout, sd.ShutdownTimeout)
	keep(&s.MaxHeaderBytes, sd.MaxHeaderBytes)
	keep(&s.MaxHeaderCount, sd.MaxHeaderCount)
	keep(&s.MaxConnections, sd.MaxConnections)
	keep(&s.ResetLimit, sd.ResetLimit)
	keep(&s.ResetWindow, sd.ResetWindow)
	keep(&s.ResetCooldown, sd.ResetCooldown)
	keep(&s.MetricsListen, sd.MetricsListen)
	keep(&s.StreamWriteTimeout, sd.StreamWriteTimeout)
	c.Trust = Trust{}
	keep(&c.Trust.ClientFields, f.Trust.ClientFields)
	keep(&c.Trust.OwnedHeaders, f.Trust.OwnedHeaders)

	u, ud := &c.Upstream, &f.Upstream
	keep(&u.Mode, ud.Mode)
	keep(&u.Gateway, ud.Gateway)
	keep(&u.Render, ud.Render)
	keep(&u.Picker, ud.Picker)
	keep(&u.Models, ud.Models)
	// The roles' pools and the named ones (target rules choose those).
	for r, eps := range ud.Pools {
		if u.Pools == nil {
			u.Pools = map[upstream.Role][]upstream.Endpoint{}
		}
		u.Pools[r] = make([]upstream.Endpoint, len(eps))
		for i, e := range eps {
			u.Pools[r][i] = e.Endpoint
		}
	}
	keep(&u.Routing.CacheWeight, ud.Routing.CacheWeight)
	keep(&u.Routing.LoadWeight, ud.Routing.LoadWeight)
	keep(&u.Routing.MetricsInterval, ud.Routing.MetricsInterval)
	keep(&u.Routing.MetricsTimeout, ud.Routing.MetricsTimeout)
	keep(&u.Routing.MispredictWindow, ud.Routing.MispredictWindow)
	keep(&u.Routing.MispredictPrecision, ud.Routing.MispredictPrecision)
	keep(&u.Routing.DistrustFor, ud.Routing.DistrustFor)
	keep(&u.FailureThreshold, ud.Health.FailureThreshold)
	keep(&u.EjectFor, ud.Health.EjectFor)
	keep(&u.IdleConnTimeout, ud.Connections.IdleTimeout)
	keep(&u.MaxIdleConnsPerHost, ud.Connections.MaxIdlePerHost)
	keep(&u.MaxConnsPerHost, ud.Connections.MaxPerHost)
	keep(&u.ShortPromptTokens, ud.ConditionalDecode.ShortPromptTokens)
	keep(&u.PrefixBlockTokens, ud.ConditionalDecode.PrefixBlockTokens)
	keep(&u.PrefixIndexSize, ud.ConditionalDecode.PrefixIndexSize)
	u.OwnedHeaders = c.Trust.OwnedHeaders
	c.decodeTLS(f)
	decodeKVEvents(&c.KVEvents, ud)

	t, td := &c.Telemetry, &f.Telemetry
	keep(&t.LogLevel, td.LogLevel)
	keep(&t.LogFormat, td.LogFormat)
	keep(&t.Tracing.Enabled, td.Tracing.Enabled)
	keep(&t.Tracing.Protocol, td.Tracing.Protocol)
	keep(&t.Tracing.Endpoint, td.Tracing.Endpoint)

	decodeAsync(&c.Async, &f.Async)
	c.Admission = decodeAdmission(&f.Admission)

	switch w := f.Workflow.V.(type) {
	case string:
		// A path in the file is relative to the file; one from the
		// environment is relative to the working directory.
		if _, env := c.fromEnv["/workflow"]; !env && !filepath.IsAbs(w) {
			w = filepath.Join(filepath.Dir(c.File), w)
		}
		c.Workflow.Path = w
	case map[string]any:
		c.Workflow.Inline, _ = c.doc.Sub("/workflow")
	}
}
