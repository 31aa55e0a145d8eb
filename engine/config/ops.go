package config

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"time"

	"github.com/celflow/celflow/engine/tlsfiles"
	"github.com/celflow/celflow/schema"
)

// DefaultTLSReloadInterval is how often server.tls and upstream.tls files
// are polled for a change.
const DefaultTLSReloadInterval = 10 * time.Second

// decodeOps reads server.tls, server.metrics_listen, upstream.tls and
// upstream.models. File paths in the config file are relative to it; paths
// from the environment to the working directory, as `workflow` is.
func (c *Config) decodeOps(v values) {
	t := &c.Server.TLS
	c.path(v, "/server/tls/cert_file", &t.CertFile)
	c.path(v, "/server/tls/key_file", &t.KeyFile)
	v.bool("/server/tls/self_signed", &t.SelfSigned)
	v.version("/server/tls/min_version", &t.MinVersion)
	c.path(v, "/server/tls/client_ca_file", &t.ClientCAFile)
	v.str("/server/tls/client_auth", &t.ClientAuth)
	v.dur("/server/tls/reload_interval", &t.ReloadInterval)
	v.str("/server/metrics_listen", &c.Server.MetricsListen)

	u := &c.Upstream.TLS
	c.path(v, "/upstream/tls/ca_file", &u.CAFile)
	c.path(v, "/upstream/tls/cert_file", &u.CertFile)
	c.path(v, "/upstream/tls/key_file", &u.KeyFile)
	v.str("/upstream/tls/server_name", &u.ServerName)
	v.version("/upstream/tls/min_version", &u.MinVersion)
	v.bool("/upstream/tls/insecure_skip_verify", &u.InsecureSkipVerify)
	v.dur("/upstream/tls/reload_interval", &u.ReloadInterval)
	if x, ok := v.d.Value("/upstream/models"); ok {
		items, _ := x.([]any)
		c.Upstream.Models = make([]string, 0, len(items))
		for _, it := range items {
			if s, ok := it.(string); ok {
				c.Upstream.Models = append(c.Upstream.Models, s)
			}
		}
	}
}

// path reads a file path, resolved against the config file's directory
// unless absolute or set by a variable.
func (c *Config) path(v values, ptr string, dst *string) {
	v.str(ptr, dst)
	if _, env := c.fromEnv[ptr]; *dst != "" && !env && !filepath.IsAbs(*dst) {
		*dst = filepath.Join(filepath.Dir(c.File), *dst)
	}
}

// version reads a TLS version written as a string ("1.2") or, as YAML
// reads an unquoted 1.2, a number.
func (v values) version(ptr string, dst *string) {
	switch x, _ := v.d.Value(ptr); x := x.(type) {
	case string:
		*dst = x
	case json.Number:
		*dst = x.String()
	}
}

// checkOps reports the TLS settings that cannot work together, at the
// offending key.
func (c *Config) checkOps() schema.Diagnostics {
	var ds schema.Diagnostics
	v := values{c.doc}
	var st tlsfiles.ServerConfig
	v.str("/server/tls/cert_file", &st.CertFile)
	v.str("/server/tls/key_file", &st.KeyFile)
	v.bool("/server/tls/self_signed", &st.SelfSigned)
	v.str("/server/tls/client_ca_file", &st.ClientCAFile)
	v.str("/server/tls/client_auth", &st.ClientAuth)
	for _, err := range st.Check() {
		ds = append(ds, c.keyDiag("/server/tls/", err.Error()))
	}
	var ut tlsfiles.ClientConfig
	v.str("/upstream/tls/cert_file", &ut.CertFile)
	v.str("/upstream/tls/key_file", &ut.KeyFile)
	v.str("/upstream/tls/ca_file", &ut.CAFile)
	v.bool("/upstream/tls/insecure_skip_verify", &ut.InsecureSkipVerify)
	for _, err := range ut.Check() {
		ds = append(ds, c.keyDiag("/upstream/tls/", err.Error()))
	}
	return ds
}

// keyDiag places "key: message" at prefix+key (the section when the key is
// absent from the document, as for a missing partner key).
func (c *Config) keyDiag(prefix, text string) schema.Diagnostic {
	key, msg, _ := strings.Cut(text, ": ")
	if _, ok := c.doc.Value(prefix + key); ok {
		return c.doc.Diag(prefix+key, schema.Error, msg).R(schema.RuleTLS)
	}
	return c.doc.Diag(strings.TrimSuffix(prefix, "/"), schema.Error, key+": "+msg).R(schema.RuleTLS)
}
