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

// Defaults of Config (docs/configuration.md, upstream; vLLM's prefix-cache
// block size).
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

// FieldError is one problem of a Config, at the key it concerns, so that
// the serve config can place it in its file without reading the text back.
type FieldError struct {
	Key string // the key as the error text names it under "upstream.": pools.prefill[0].url
	Ptr string // the serve config's JSON pointer of that key under /upstream: /pools/prefill/0/url
	Msg string
}

func (e *FieldError) Error() string { return "upstream." + e.Key + ": " + e.Msg }

// withDefaults checks cfg and fills in defaults. Every problem is reported
// (joined *FieldError values), each naming its key under "upstream." as the
// YAML spells it.
func withDefaults(cfg Config) (Config, error) {
	var errs []error
	// bad takes the key's pointer under /upstream; the dotted key of the
	// text is derived from it, except for the few Go-named keys (at).
	bad := func(ptr, format string, a ...any) {
		errs = append(errs, &FieldError{Key: dotted(ptr), Ptr: ptr, Msg: fmt.Sprintf(format, a...)})
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
			bad("/render", "%v", err)
		}
	}
	switch cfg.Mode {
	case modeGateway:
		if cfg.Gateway == "" {
			bad("/gateway", "required in gateway mode")
		} else if err := checkBase(cfg.Gateway); err != nil {
			bad("/gateway", "%v", err)
		}
		if len(cfg.Pools) > 0 {
			bad("/pools", "only allowed in direct mode")
		}
	case modeDirect:
		if cfg.Gateway != "" {
			bad("/gateway", "only allowed in gateway mode")
		}
		if len(cfg.Pools) == 0 {
			bad("/pools", "required in direct mode")
		}
		checkPools(cfg.Pools, bad)
	case "":
		bad("/mode", `set "gateway" (with gateway) or "direct" (with pools)`)
	default:
		bad("/mode", `must be "gateway" or "direct", got %q`, cfg.Mode)
	}
	switch cfg.Picker {
	case "":
		cfg.Picker = pickRoundRobin
	case pickRoundRobin, pickLeastInFlight, pickCacheAware:
	default:
		bad("/picker", `must be "round-robin", "least-in-flight" or "cache-aware", got %q`, cfg.Picker)
	}
	cfg.Routing = routingDefaults(cfg.Routing, bad)
	// These keep their Go-side names in the text (callers of New without a
	// serve config know them so); the pointer is the serve config's key.
	at := func(key, ptr string) func(_, format string, a ...any) {
		return func(_, format string, a ...any) {
			errs = append(errs, &FieldError{Key: key, Ptr: ptr, Msg: fmt.Sprintf(format, a...)})
		}
	}
	defInt(&cfg.FailureThreshold, DefaultFailureThreshold, "", at("failure_threshold", "/health/failure_threshold"))
	defDur(&cfg.EjectFor, DefaultEjectFor, "", at("eject_for", "/health/eject_for"))
	defDur(&cfg.IdleConnTimeout, DefaultIdleConnTimeout, "", at("idle_conn_timeout", "/connections/idle_timeout"))
	defInt(&cfg.MaxIdleConnsPerHost, DefaultMaxIdleConnsPerHost, "", at("max_idle_conns_per_host", "/connections/max_idle_per_host"))
	defInt(&cfg.PrefixBlockTokens, DefaultPrefixBlockTokens, "", at("prefix_block_tokens", "/conditional_decode/prefix_block_tokens"))
	defInt(&cfg.PrefixIndexSize, DefaultPrefixIndexSize, "", at("prefix_index_size", "/conditional_decode/prefix_index_size"))
	if cfg.MaxConnsPerHost < 0 {
		at("max_conns_per_host", "/connections/max_per_host")("", "must be ≥ 0, got %d", cfg.MaxConnsPerHost)
	}
	if cfg.ShortPromptTokens < 0 {
		at("short_prompt_tokens", "/conditional_decode/short_prompt_tokens")("", "must be ≥ 0, got %d", cfg.ShortPromptTokens)
	}
	return cfg, errors.Join(errs...)
}

// dotted spells a pointer as the error text does: /pools/prefill/0/url is
// pools.prefill[0].url (only an endpoint's index is bracketed: a pool's
// name is printed as given). The health, connections and
// conditional_decode keys keep their Go-side names in the text (at).
func dotted(ptr string) string {
	var b strings.Builder
	segs := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, seg := range segs {
		seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
		if i == 2 && segs[0] == "pools" {
			b.WriteString("[" + seg + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return b.String()
}

// poolPtr is the pointer of a pool's key (its name escaped as RFC 6901 says).
func poolPtr(name string) string {
	return "/pools/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}

func checkPools(pools map[Role][]Endpoint, bad func(key, format string, a ...any)) {
	for _, r := range []Role{RoleEncode, RolePrefill, RoleDecode} {
		seen := map[string]bool{}
		for i, ep := range pools[r] {
			key := fmt.Sprintf("%s/%d", poolPtr(string(r)), i)
			if err := checkBase(ep.URL); err != nil {
				bad(key+"/url", "%v", err)
			}
			u := strings.TrimRight(ep.URL, "/")
			if seen[u] {
				bad(key+"/url", "duplicate endpoint %q", ep.URL)
			}
			seen[u] = true
			if ep.BootstrapPort < 0 || ep.BootstrapPort > 65535 {
				bad(key+"/bootstrap_port", "must be 1–65535, got %d", ep.BootstrapPort)
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
			bad(poolPtr(name), `reserved: the render service is upstream.render, not a pool`)
			continue
		}
		if !poolNameRE.MatchString(name) {
			bad(poolPtr(name), `a pool name is lower-case letters, digits and "-", starting with a letter (at most 63)`)
			continue
		}
		seen := map[string]bool{}
		for i, ep := range pools[Role(name)] {
			key := fmt.Sprintf("%s/%d", poolPtr(name), i)
			if err := checkBase(ep.URL); err != nil {
				bad(key+"/url", "%v", err)
			}
			u := strings.TrimRight(ep.URL, "/")
			if seen[u] {
				bad(key+"/url", "duplicate endpoint %q", ep.URL)
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
