package config

import (
	"errors"
	"path/filepath"
	"strings"
	"time"

	"github.com/celflow/celflow/internal/tlsfiles"
	"github.com/celflow/celflow/schema"
)

// DefaultTLSReloadInterval is how often server.tls and upstream.tls files
// are polled for a change.
const DefaultTLSReloadInterval = 10 * time.Second

// decodeTLS reads server.tls and upstream.tls. File paths in the config
// file are relative to it; paths from the environment to the working
// directory, as `workflow` is.
func (c *Config) decodeTLS(f *fileDoc) {
	t, td := &c.Server.TLS, &f.Server.TLS
	c.path(&t.CertFile, td.CertFile)
	c.path(&t.KeyFile, td.KeyFile)
	keep(&t.SelfSigned, td.SelfSigned)
	version(&t.MinVersion, td.MinVersion)
	c.path(&t.ClientCAFile, td.ClientCAFile)
	keep(&t.ClientAuth, td.ClientAuth)
	keep(&t.ReloadInterval, td.ReloadInterval)

	u, ud := &c.Upstream.TLS, &f.Upstream.TLS
	c.path(&u.CAFile, ud.CAFile)
	c.path(&u.CertFile, ud.CertFile)
	c.path(&u.KeyFile, ud.KeyFile)
	keep(&u.ServerName, ud.ServerName)
	version(&u.MinVersion, ud.MinVersion)
	keep(&u.InsecureSkipVerify, ud.InsecureSkipVerify)
	keep(&u.ReloadInterval, ud.ReloadInterval)
}

// path reads a file path, resolved against the config file's directory
// unless absolute or set by a variable.
func (c *Config) path(dst *string, v schema.Val[string]) {
	keep(dst, v)
	if _, env := c.fromEnv[v.Ptr]; *dst != "" && !env && !filepath.IsAbs(*dst) {
		*dst = filepath.Join(filepath.Dir(c.File), *dst)
	}
}

// checkOps reports the TLS settings that cannot work together, at the
// offending key (after decode).
func (c *Config) checkOps() schema.Diagnostics {
	var ds schema.Diagnostics
	for _, err := range c.Server.TLS.Check() {
		ds = append(ds, c.keyDiag("/server/tls/", err))
	}
	for _, err := range c.Upstream.TLS.Check() {
		ds = append(ds, c.keyDiag("/upstream/tls/", err))
	}
	return ds
}

// keyDiag places a setting's error (*tlsfiles.KeyError) at prefix+key (the
// section when the key is absent from the document, as for a missing
// partner key); another error at the section.
func (c *Config) keyDiag(prefix string, err error) schema.Diagnostic {
	var ke *tlsfiles.KeyError
	if !errors.As(err, &ke) {
		return c.doc.Diag(strings.TrimSuffix(prefix, "/"), schema.Error, err.Error()).R(schema.RuleTLS)
	}
	key, msg := ke.Key, ke.Msg
	if _, ok := c.doc.Value(prefix + key); ok {
		return c.doc.Diag(prefix+key, schema.Error, msg).R(schema.RuleTLS)
	}
	return c.doc.Diag(strings.TrimSuffix(prefix, "/"), schema.Error, key+": "+msg).R(schema.RuleTLS)
}
