package fetchmedia

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// params is the node's YAML params (schema.json is the strict contract;
// Build re-checks what a schema cannot: overflow, durations, URLs).
type params struct {
	MaxMultimodalEntries   leg.Number   `json:"max_multimodal_entries"`
	MaxConcurrentDownloads leg.Number   `json:"max_concurrent_downloads"`
	DownloadTimeout        string       `json:"download_timeout"`
	AllowedDomains         []string     `json:"allowed_domains"`
	AllowPrivateNetworks   bool         `json:"allow_private_networks"`
	AllowLoopback          bool         `json:"allow_loopback"`
	Proxy                  string       `json:"proxy"`
	Image                  *modParams   `json:"image"`
	Video                  *modParams   `json:"video"`
	Audio                  *modParams   `json:"audio"`
	InputAudioFormats      []string     `json:"input_audio_formats"`
	Cache                  *cacheParams `json:"cache"`
}

type modParams struct {
	MaxDownloadSize leg.Number `json:"max_download_size"` // MiB
	Types           []string   `json:"types"`
}

type cacheParams struct {
	MaxBytes leg.Number `json:"max_bytes"`
	TTL      string     `json:"ttl"`
}

// Defaults (docs/protocol.md, fetch-media).
const (
	defaultConcurrency = 10
	defaultTimeout     = 10 * time.Second
	defaultSizeMiB     = 10
	defaultCacheTTL    = 10 * time.Minute
	maxRedirects       = 10
)

var defaultTypes = map[string][]string{
	"image": {"image/jpeg", "image/png", "image/gif", "image/webp"},
	"video": {"video/mp4", "video/webm", "video/quicktime"},
	"audio": {"audio/wav", "audio/x-wav", "audio/wave", "audio/mpeg", "audio/ogg", "audio/flac", "audio/webm"},
}

var defaultAudioFormats = []string{"wav", "mp3"}

// modPolicy is one modality's limits.
type modPolicy struct {
	maxBytes int64
	types    map[string]bool
}

// config is the validated, immutable configuration of one node.
type config struct {
	maxEntries  int
	concurrency int
	timeout     time.Duration
	domains     map[string]bool // empty: any host
	guard       Guard
	proxy       *url.URL
	mods        map[string]*modPolicy
	audioFmts   map[string]bool
	cacheBytes  int64 // 0: no cache
	cacheTTL    time.Duration
}

func parseParams(raw json.RawMessage) (*config, error) {
	var p params
	if err := leg.Decode(raw, &p); err != nil {
		return nil, err
	}
	var errs engine.ParamErrors
	add := func(err error) {
		if err == nil {
			return
		}
		if pe, ok := err.(*engine.ParamError); ok {
			errs = append(errs, pe)
			return
		}
		errs = append(errs, &engine.ParamError{Msg: err.Error()})
	}
	c := &config{
		guard: Guard{AllowPrivate: p.AllowPrivateNetworks, AllowLoopback: p.AllowLoopback},
		mods:  map[string]*modPolicy{},
	}
	n, err := leg.Int("/max_multimodal_entries", p.MaxMultimodalEntries, 0, 0)
	add(err)
	c.maxEntries = int(min(n, math.MaxInt32))
	n, err = leg.Int("/max_concurrent_downloads", p.MaxConcurrentDownloads, 1, defaultConcurrency)
	add(err)
	c.concurrency = int(min(n, 1<<16))
	c.timeout, err = leg.Duration("/download_timeout", p.DownloadTimeout, defaultTimeout)
	add(err)
	if err == nil && c.timeout == 0 {
		add(&engine.ParamError{Path: "/download_timeout", Msg: "must be positive"})
	}
	if len(p.AllowedDomains) > 0 {
		c.domains = map[string]bool{}
		for i, d := range p.AllowedDomains {
			d = strings.ToLower(strings.TrimSpace(d))
			if d == "" {
				add(&engine.ParamError{Path: "/allowed_domains/" + strconv.Itoa(i), Msg: "empty domain"})
			}
			c.domains[d] = true
		}
	}
	if p.Proxy != "" {
		u, err := url.Parse(p.Proxy)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(&engine.ParamError{Path: "/proxy", Msg: fmt.Sprintf("invalid proxy URL %q (want http://host:port)", p.Proxy)})
		}
		c.proxy = u
	}
	for _, m := range []struct {
		name string
		p    *modParams
	}{{"image", p.Image}, {"video", p.Video}, {"audio", p.Audio}} {
		pol := &modPolicy{types: map[string]bool{}}
		mb := int64(defaultSizeMiB)
		types := defaultTypes[m.name]
		if m.p != nil {
			v, err := leg.Int("/"+m.name+"/max_download_size", m.p.MaxDownloadSize, 1, defaultSizeMiB)
			add(err)
			mb = v
			if m.p.Types != nil {
				types = m.p.Types
			}
		}
		if mb > math.MaxInt64>>20 {
			add(&engine.ParamError{Path: "/" + m.name + "/max_download_size", Msg: fmt.Sprintf("%d MiB overflows a byte count", mb)})
		}
		pol.maxBytes = mb << 20
		for _, t := range types {
			pol.types[strings.ToLower(strings.TrimSpace(t))] = true
		}
		c.mods[m.name] = pol
	}
	fmts := defaultAudioFormats
	if p.InputAudioFormats != nil {
		fmts = p.InputAudioFormats
	}
	c.audioFmts = map[string]bool{}
	for _, f := range fmts {
		c.audioFmts[strings.ToLower(strings.TrimSpace(f))] = true
	}
	if p.Cache != nil {
		v, err := leg.Int("/cache/max_bytes", p.Cache.MaxBytes, 1, 0)
		add(err)
		if err == nil && v == 0 {
			add(&engine.ParamError{Path: "/cache/max_bytes", Msg: "required when cache is set"})
		}
		c.cacheBytes = v
		c.cacheTTL, err = leg.Duration("/cache/ttl", p.Cache.TTL, defaultCacheTTL)
		add(err)
		if err == nil && c.cacheTTL == 0 {
			add(&engine.ParamError{Path: "/cache/ttl", Msg: "must be positive"})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}
