package fetchmedia

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
)

// ACCEPTANCE 19: defaults.
func TestParamsDefaults(t *testing.T) {
	for _, raw := range []string{``, `null`, `{}`} {
		c, err := parseParams(json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		if c.concurrency != 10 || c.timeout != 10*time.Second || c.maxEntries != 0 || c.cacheBytes != 0 || c.proxy != nil || c.domains != nil {
			t.Errorf("%q: %+v", raw, c)
		}
		for _, m := range []string{"image", "video", "audio"} {
			if c.mods[m].maxBytes != 10<<20 {
				t.Errorf("%s cap %d", m, c.mods[m].maxBytes)
			}
		}
		if !c.mods["image"].types["image/webp"] || !c.mods["audio"].types["audio/x-wav"] || !c.mods["video"].types["video/quicktime"] {
			t.Error("default allowlists")
		}
		if !c.audioFmts["wav"] || !c.audioFmts["mp3"] || len(c.audioFmts) != 2 || c.guard != (Guard{}) {
			t.Error("audio formats / guard")
		}
	}
}

// ACCEPTANCE 22, 25, 26, 27 (what Build checks beyond the schema).
func TestParamsErrors(t *testing.T) {
	ok := []string{
		`{"max_concurrent_downloads":5}`, `{"max_concurrent_downloads":5.0}`, `{"max_multimodal_entries":0}`,
		`{"image":{"max_download_size":5}}`, `{"allowed_domains":["a.example"]}`, `{"cache":{"max_bytes":1000}}`,
		`{"proxy":"http://proxy:3128","download_timeout":"2s"}`,
	}
	for _, raw := range ok {
		if _, err := parseParams(json.RawMessage(raw)); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
	bad := map[string]string{
		`{"max_multimodal_entries":-1}`:                    "/max_multimodal_entries",
		`{"max_concurrent_downloads":0}`:                   "/max_concurrent_downloads",
		`{"max_concurrent_downloads":-1}`:                  "/max_concurrent_downloads",
		`{"max_concurrent_downloads":4.5}`:                 "/max_concurrent_downloads",
		`{"max_concurrent_downloads":1e19}`:                "/max_concurrent_downloads",
		`{"max_concurrent_downloads":"5"}`:                 "/max_concurrent_downloads",
		`{"image":{"max_download_size":0}}`:                "/image/max_download_size",
		`{"video":{"max_download_size":-3}}`:               "/video/max_download_size",
		`{"audio":{"max_download_size":9007199254740993}}`: "/audio/max_download_size",
		`{"download_timeout":"30"}`:                        "/download_timeout",
		`{"download_timeout":"abc"}`:                       "/download_timeout",
		`{"download_timeout":30}`:                          "/download_timeout",
		`{"allowed_domains":"img.example"}`:                "/allowed_domains",
		`{"allowed_domains":[5]}`:                          "/allowed_domains",
		`{"allow_loopback":"true"}`:                        "/allow_loopback",
		`{"allow_private_networks":1}`:                     "/allow_private_networks",
		`{"proxy":"not a url"}`:                            "/proxy",
		`{"endpoint":"x"}`:                                 "/endpoint",
		`{"cache":{"ttl":"1m"}}`:                           "/cache/max_bytes",
		`{"cache":{"max_bytes":10,"ttl":"0s"}}`:            "/cache/ttl",
	}
	for raw, path := range bad {
		_, err := parseParams(json.RawMessage(raw))
		if err == nil {
			t.Errorf("%s accepted", raw)
			continue
		}
		var pe *engine.ParamError
		var pes engine.ParamErrors
		switch {
		case errors.As(err, &pes):
			pe = pes[0]
		case errors.As(err, &pe):
		default:
			t.Errorf("%s: %T %v", raw, err, err)
			continue
		}
		if !strings.HasPrefix(pe.Path, path) {
			t.Errorf("%s: path %q (%s), want %s", raw, pe.Path, pe.Msg, path)
		}
	}
}

func TestRegistered(t *testing.T) {
	nt, ok := engine.LookupType(TypeName)
	if !ok || !json.Valid(nt.Schema) || nt.FanOut {
		t.Fatal("fetch-media not registered")
	}
	n, err := nt.Build(&engine.BuildContext{}, json.RawMessage(`{"allow_loopback":true}`))
	if err != nil {
		t.Fatal(err)
	}
	c := n.Contract()
	if len(c.Provides) != 1 || c.Provides[0] != engine.KeyMedia || c.Role != "" || c.Responds || len(c.Needs) != 0 {
		t.Errorf("contract %+v", c)
	}
}
