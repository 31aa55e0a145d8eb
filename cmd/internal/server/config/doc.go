package config

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/schema"
)

// fileDoc is the serve config as written, decoded with schema.Decode like
// a workflow (engine/loaddoc.go): each leaf a schema.Val with its position.
// The document has been validated first, so a value of the wrong type is
// simply unset (the schema reported it) and its default stays.
type fileDoc struct {
	Server    serverDoc       `json:"server"`
	Trust     trustDoc        `json:"trust"`
	Upstream  upstreamDoc     `json:"upstream"`
	Telemetry telemetryDoc    `json:"telemetry"`
	Async     asyncDoc        `json:"async"`
	Admission admissionDoc    `json:"admission"`
	Workflow  schema.Val[any] `json:"workflow"` // a path, or an inline workflow
}

type serverDoc struct {
	Listen             schema.Val[string]        `json:"listen"`
	MaxRequestBodySize schema.Val[int64]         `json:"max_request_body_size"`
	ReadHeaderTimeout  schema.Val[time.Duration] `json:"read_header_timeout"`
	ReadTimeout        schema.Val[time.Duration] `json:"read_timeout"`
	WriteTimeout       schema.Val[time.Duration] `json:"write_timeout"`
	DrainDelay         schema.Val[time.Duration] `json:"drain_delay"`
	ShutdownTimeout    schema.Val[time.Duration] `json:"shutdown_timeout"`
	MaxHeaderBytes     schema.Val[int]           `json:"max_header_bytes"`
	MaxHeaderCount     schema.Val[int]           `json:"max_header_count"`
	MaxConnections     schema.Val[int]           `json:"max_connections"`
	ResetLimit         schema.Val[int]           `json:"reset_limit"`
	ResetWindow        schema.Val[time.Duration] `json:"reset_window"`
	ResetCooldown      schema.Val[time.Duration] `json:"reset_cooldown"`
	MetricsListen      schema.Val[string]        `json:"metrics_listen"`
	StreamWriteTimeout schema.Val[time.Duration] `json:"stream_write_timeout"`
	TLS                serverTLSDoc              `json:"tls"`
}

type serverTLSDoc struct {
	CertFile       schema.Val[string]        `json:"cert_file"`
	KeyFile        schema.Val[string]        `json:"key_file"`
	SelfSigned     schema.Val[bool]          `json:"self_signed"`
	MinVersion     schema.Val[any]           `json:"min_version"` // "1.2", or 1.2 as YAML reads it unquoted
	ClientCAFile   schema.Val[string]        `json:"client_ca_file"`
	ClientAuth     schema.Val[string]        `json:"client_auth"`
	ReloadInterval schema.Val[time.Duration] `json:"reload_interval"`
}

type trustDoc struct {
	ClientFields schema.Val[[]string] `json:"client_fields"`
	OwnedHeaders schema.Val[[]string] `json:"owned_headers"`
}

type upstreamDoc struct {
	Mode    schema.Val[string]   `json:"mode"`
	Gateway schema.Val[string]   `json:"gateway"`
	Render  schema.Val[string]   `json:"render"`
	Picker  schema.Val[string]   `json:"picker"`
	Models  schema.Val[[]string] `json:"models"`
	Pools   poolsDoc             `json:"pools"`
	Routing struct {
		CacheWeight         schema.Val[float64]       `json:"cache_weight"`
		LoadWeight          schema.Val[float64]       `json:"load_weight"`
		MetricsInterval     schema.Val[time.Duration] `json:"metrics_interval"`
		MetricsTimeout      schema.Val[time.Duration] `json:"metrics_timeout"`
		MispredictWindow    schema.Val[int]           `json:"mispredict_window"`
		MispredictPrecision schema.Val[float64]       `json:"mispredict_precision"`
		DistrustFor         schema.Val[time.Duration] `json:"distrust_for"`
	} `json:"routing"`
	Health struct {
		FailureThreshold schema.Val[int]           `json:"failure_threshold"`
		EjectFor         schema.Val[time.Duration] `json:"eject_for"`
	} `json:"health"`
	Connections struct {
		IdleTimeout    schema.Val[time.Duration] `json:"idle_timeout"`
		MaxIdlePerHost schema.Val[int]           `json:"max_idle_per_host"`
		MaxPerHost     schema.Val[int]           `json:"max_per_host"`
	} `json:"connections"`
	KVEvents          kvEventsDoc `json:"kv_events"`
	ConditionalDecode struct {
		ShortPromptTokens schema.Val[int] `json:"short_prompt_tokens"`
		PrefixBlockTokens schema.Val[int] `json:"prefix_block_tokens"`
		PrefixIndexSize   schema.Val[int] `json:"prefix_index_size"`
	} `json:"conditional_decode"`
	TLS struct {
		CAFile             schema.Val[string]        `json:"ca_file"`
		CertFile           schema.Val[string]        `json:"cert_file"`
		KeyFile            schema.Val[string]        `json:"key_file"`
		ServerName         schema.Val[string]        `json:"server_name"`
		MinVersion         schema.Val[any]           `json:"min_version"`
		InsecureSkipVerify schema.Val[bool]          `json:"insecure_skip_verify"`
		ReloadInterval     schema.Val[time.Duration] `json:"reload_interval"`
	} `json:"tls"`
}

// poolsDoc is upstream.pools: the roles' pools and the named ones, each a
// list of endpoints. Its names are read from the value, not from the
// document's position index: a CELFLOW_UPSTREAM_POOLS_* variable adds a
// pool the file does not have.
type poolsDoc map[upstream.Role][]endpointDoc

func (p *poolsDoc) DecodeDoc(d *schema.Doc, ptr string) {
	raw, _ := d.Value(ptr)
	m, ok := raw.(map[string]any)
	if !ok {
		return
	}
	*p = poolsDoc{}
	for name := range m {
		var eps []endpointDoc
		schema.Decode(d, schema.Ptr(ptr, name), &eps)
		if eps == nil {
			if _, isList := m[name].([]any); !isList {
				continue // the schema reported it
			}
			eps = []endpointDoc{}
		}
		(*p)[upstream.Role(name)] = eps
	}
}

// endpointDoc is one endpoint: a URL string or {url, bootstrap_port,
// kv_events, kv_replay}.
type endpointDoc struct {
	upstream.Endpoint
	schema.Pos
	KVEvents, KVReplay string // the worker's KV event publisher and replay endpoint (kvevents.go)
}

func (e *endpointDoc) DecodeDoc(d *schema.Doc, ptr string) {
	l, c := d.Pos(ptr)
	e.Pos = schema.Pos{Ptr: ptr, Line: l, Col: c}
	var s schema.Val[string]
	if s.DecodeDoc(d, ptr); s.Set {
		e.URL = strings.TrimSpace(s.V)
		return
	}
	var o struct {
		URL           schema.Val[string] `json:"url"`
		BootstrapPort schema.Val[int]    `json:"bootstrap_port"`
		KVEvents      schema.Val[string] `json:"kv_events"`
		KVReplay      schema.Val[string] `json:"kv_replay"`
	}
	schema.Decode(d, ptr, &o)
	e.URL, e.BootstrapPort = o.URL.V, o.BootstrapPort.V
	e.KVEvents, e.KVReplay = o.KVEvents.V, o.KVReplay.V
}

type telemetryDoc struct {
	LogLevel  schema.Val[string] `json:"log_level"`
	LogFormat schema.Val[string] `json:"log_format"`
	Tracing   struct {
		Enabled  schema.Val[bool]   `json:"enabled"`
		Protocol schema.Val[string] `json:"protocol"`
		Endpoint schema.Val[string] `json:"endpoint"`
	} `json:"tracing"`
}

type asyncDoc struct {
	RedisURL  schema.Val[string]   `json:"redis_url"`
	Backend   schema.Val[string]   `json:"backend"`
	KeyPrefix schema.Val[string]   `json:"key_prefix"`
	Queues    schema.Val[[]string] `json:"queues"`
	Tiers     schema.Val[[]string] `json:"tiers"`
	Timeouts  struct {
		Wait    schema.Val[time.Duration] `json:"wait"`
		WaitMax schema.Val[time.Duration] `json:"wait_max"`
		Enqueue schema.Val[time.Duration] `json:"enqueue"`
	} `json:"timeouts"`
	WaitCap        schema.Val[time.Duration] `json:"wait_cap"`
	MaxWaiters     schema.Val[int]           `json:"max_waiters"`
	FetchGrace     schema.Val[time.Duration] `json:"fetch_grace"`
	ResultTTL      schema.Val[time.Duration] `json:"result_ttl"`
	MaxDeliveries  schema.Val[int]           `json:"max_deliveries"`
	Lease          schema.Val[time.Duration] `json:"lease"`
	PollInterval   schema.Val[time.Duration] `json:"poll_interval"`
	MaxInlineBytes schema.Val[int]           `json:"max_inline_bytes"`
	Backlog        struct {
		PerTenant schema.Val[int] `json:"per_tenant"`
		PerQueue  schema.Val[int] `json:"per_queue"`
	} `json:"backlog"`
	Dispatcher struct {
		Enabled     schema.Val[bool] `json:"enabled"`
		Concurrency schema.Val[int]  `json:"concurrency"`
		Budget      schema.Val[int]  `json:"budget"`
	} `json:"dispatcher"`
}

type admissionDoc struct {
	MaxInFlight schema.Val[int] `json:"max_in_flight"`
	Routes      struct {
		Chat        schema.Val[int] `json:"chat"`
		Completions schema.Val[int] `json:"completions"`
		Generate    schema.Val[int] `json:"generate"`
	} `json:"routes"`
	MaxQueue     schema.Val[int]           `json:"max_queue"`
	QueueTimeout schema.Val[time.Duration] `json:"queue_timeout"`
	RetryAfter   schema.Val[time.Duration] `json:"retry_after"`
	Priority     schema.Val[string]        `json:"priority"`
}

// keep stores a decoded value over its default when the document has it.
func keep[T any](dst *T, v schema.Val[T]) {
	if v.Set {
		*dst = v.V
	}
}

// version reads a TLS version written as a string ("1.2") or, as YAML
// reads an unquoted 1.2, a number.
func version(dst *string, v schema.Val[any]) {
	switch x := v.V.(type) {
	case string:
		*dst = x
	case json.Number:
		*dst = x.String()
	}
}

// readDoc decodes the (validated) document.
func readDoc(d *schema.Doc) *fileDoc {
	var f fileDoc
	schema.Decode(d, "", &f)
	return &f
}
