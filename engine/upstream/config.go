package upstream

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Defaults of Config (FIELD-NOTES 3, 5, 7; vLLM's prefix-cache block size).
const (
	DefaultFailureThreshold    = 3
	DefaultEjectFor            = 10 * time.Second
	DefaultIdleConnTimeout     = 4 * time.Second // below uvicorn's 5 s keep-alive
	DefaultMaxIdleConnsPerHost = 256
	DefaultPrefixBlockTokens   = 16
	DefaultPrefixIndexSize     = 10000
)

const (
	modeGateway = "gateway"
	modeDirect  = "direct"

	pickRoundRobin    = "round-robin"
	pickLeastInFlight = "least-in-flight"
)

// withDefaults checks cfg and fills in defaults. Every problem is reported
// (joined), each naming its key under "upstream." as the YAML spells it.
func withDefaults(cfg Config) (Config, error) {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("upstream.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if cfg.Mode == "" {
		// Inferred when unambiguous: a gateway URL or pools, not both.
		switch {
		case cfg.Gateway != "" && len(cfg.Pools) == 0:
			cfg.Mode = modeGateway
		case cfg.Gateway == "" && len(cfg.Pools) > 0:
			cfg.Mode = modeDirect
		}
	}
	if cfg.Render != "" {
		if err := checkBase(cfg.Render); err != nil {
			bad("render", "%v", err)
		}
	}
	switch cfg.Mode {
	case modeGateway:
		if cfg.Gateway == "" {
			bad("gateway", "required in gateway mode")
		} else if err := checkBase(cfg.Gateway); err != nil {
			bad("gateway", "%v", err)
		}
		if len(cfg.Pools) > 0 {
			bad("pools", "only allowed in direct mode")
		}
	case modeDirect:
		if cfg.Gateway != "" {
			bad("gateway", "only allowed in gateway mode")
		}
		if len(cfg.Pools) == 0 {
			bad("pools", "required in direct mode")
		}
		checkPools(cfg.Pools, bad)
	case "":
		bad("mode", `set "gateway" (with gateway) or "direct" (with pools)`)
	default:
		bad("mode", `must be "gateway" or "direct", got %q`, cfg.Mode)
	}
	switch cfg.Picker {
	case "":
		cfg.Picker = pickRoundRobin
	case pickRoundRobin, pickLeastInFlight:
	default:
		bad("picker", `must be "round-robin" or "least-in-flight", got %q`, cfg.Picker)
	}
	defInt(&cfg.FailureThreshold, DefaultFailureThreshold, "failure_threshold", bad)
	defDur(&cfg.EjectFor, DefaultEjectFor, "eject_for", bad)
	defDur(&cfg.IdleConnTimeout, DefaultIdleConnTimeout, "idle_conn_timeout", bad)
	defInt(&cfg.MaxIdleConnsPerHost, DefaultMaxIdleConnsPerHost, "max_idle_conns_per_host", bad)
	defInt(&cfg.PrefixBlockTokens, DefaultPrefixBlockTokens, "prefix_block_tokens", bad)
	defInt(&cfg.PrefixIndexSize, DefaultPrefixIndexSize, "prefix_index_size", bad)
	if cfg.MaxConnsPerHost < 0 {
		bad("max_conns_per_host", "must be ≥ 0, got %d", cfg.MaxConnsPerHost)
	}
	if cfg.ShortPromptTokens < 0 {
		bad("short_prompt_tokens", "must be ≥ 0, got %d", cfg.ShortPromptTokens)
	}
	return cfg, errors.Join(errs...)
}

func checkPools(pools map[Role][]Endpoint, bad func(key, format string, a ...any)) {
	for _, r := range []Role{RoleEncode, RolePrefill, RoleDecode} {
		seen := map[string]bool{}
		for i, ep := range pools[r] {
			key := fmt.Sprintf("pools.%s[%d]", r, i)
			if err := checkBase(ep.URL); err != nil {
				bad(key+".url", "%v", err)
			}
			u := strings.TrimRight(ep.URL, "/")
			if seen[u] {
				bad(key+".url", "duplicate endpoint %q", ep.URL)
			}
			seen[u] = true
			if ep.BootstrapPort < 0 || ep.BootstrapPort > 65535 {
				bad(key+".bootstrap_port", "must be 1–65535, got %d", ep.BootstrapPort)
			}
		}
	}
	// Named pools (chosen by target rules): the same endpoint checks; a
	// name is lower-case letters, digits and '-', starting with a letter.
	var named []string
	for r := range pools {
		if roleIndex(r) < 0 {
			named = append(named, string(r))
		}
	}
	sort.Strings(named) // deterministic diagnostics
	for _, name := range named {
		if name == "render" {
			bad("pools."+name, `reserved: the render service is upstream.render, not a pool`)
			continue
		}
		if !poolNameRE.MatchString(name) {
			bad("pools."+name, `a pool name is lower-case letters, digits and "-", starting with a letter (at most 63)`)
			continue
		}
		seen := map[string]bool{}
		for i, ep := range pools[Role(name)] {
			key := fmt.Sprintf("pools.%s[%d]", name, i)
			if err := checkBase(ep.URL); err != nil {
				bad(key+".url", "%v", err)
			}
			u := strings.TrimRight(ep.URL, "/")
			if seen[u] {
				bad(key+".url", "duplicate endpoint %q", ep.URL)
			}
			seen[u] = true
		}
	}
}

var poolNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// checkBase accepts an absolute http(s) URL with a host and without query
// or fragment; a path prefix is allowed (a gateway behind a path).
func checkBase(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid URL %q", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL %q: scheme must be http or https", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("URL %q has no host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("URL %q: no user info, query or fragment allowed", s)
	}
	return nil
}

func defInt(v *int, def int, key string, bad func(key, format string, a ...any)) {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		bad(key, "must be > 0, got %d", *v)
	}
}

func defDur(v *time.Duration, def time.Duration, key string, bad func(key, format string, a ...any)) {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		bad(key, "must be > 0, got %s", *v)
	}
}
