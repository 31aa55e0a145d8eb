package main

import (
	"context"
	"crypto/x509"
	"errors"
	"reflect"
	"sync/atomic"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/config"
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/server/metrics"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/internal/tlsfiles"
)

// tlsState is serve's TLS material: the listener's (nil when it serves
// plain HTTP) and the current upstream client's, with their logs and
// metrics. Reloads come from SIGHUP (the reloader) and from the file polls
// (watch); tlsfiles serialises them.
type tlsState struct {
	log *logrus.Logger
	m   *metrics.TLS
	srv *tlsfiles.Server
	up  atomic.Pointer[upstream.Client]
}

// newTLSState takes the listener's TLS material prepare loaded (nil: plain
// HTTP) and logs it.
func newTLSState(s *tlsfiles.Server, cfg *config.Config, log *logrus.Logger, m *metrics.Metrics) *tlsState {
	t := &tlsState{log: log, m: metrics.NewTLS(m)}
	if s == nil {
		return t
	}
	st := cfg.Server.TLS
	t.srv = s
	leaf := s.Leaf()
	e := log.WithFields(certFields(leaf)).WithFields(logrus.Fields{"min_version": orDefault(st.MinVersion, "1.2"),
		"client_auth": st.ClientCAFile != "" && st.ClientAuth != "none"})
	if st.SelfSigned {
		e.Warn("TLS: serving a self-signed certificate generated at start-up; clients must pin its fingerprint or skip verification")
	} else {
		e.Info("TLS: serving the configured certificate")
	}
	t.m.Expiry(metrics.TLSScopeServer, leaf.NotAfter)
	return t
}

// options is the listener's tls.Config, nil for plain HTTP.
func (t *tlsState) options(o *front.Options) {
	if t.srv != nil {
		o.TLS = t.srv.Config()
	}
}

// setUpstream makes c the client whose files reload, and warns when it
// does not verify certificates.
func (t *tlsState) setUpstream(c *upstream.Client) {
	if t.up.Swap(c) == c {
		return
	}
	if c.TLSInsecure() {
		t.log.Warn("TLS: upstream.tls.insecure_skip_verify is on: upstream certificates are NOT verified; anyone on the path can read and change every leg")
	}
	if leaf := c.TLSClientLeaf(); leaf != nil {
		t.m.Expiry(metrics.TLSScopeUpstream, leaf.NotAfter)
	}
}

// reloadServer re-reads the listener's files; with cfg (a config reload
// that succeeded) it applies the new server.tls settings too.
func (t *tlsState) reloadServer(cfg *config.Config) {
	if t.srv == nil {
		return
	}
	var err error
	if cfg != nil && cfg.Server.TLS.Enabled() {
		err = t.srv.Update(cfg.Server.TLS)
	} else {
		err = t.srv.Reload()
	}
	t.report(metrics.TLSScopeServer, err, t.srv.Leaf)
}

// reloadUpstream re-reads the current upstream client's files.
func (t *tlsState) reloadUpstream() {
	if c := t.up.Load(); c != nil {
		t.report(metrics.TLSScopeUpstream, c.ReloadTLS(), c.TLSClientLeaf)
	}
}

func (t *tlsState) report(scope string, err error, leaf func() *x509.Certificate) {
	switch {
	case errors.Is(err, tlsfiles.ErrUnchanged):
		return
	case err != nil:
		t.log.WithError(err).WithField("scope", scope).Error("TLS reload failed: the previous certificate serves on")
		t.m.Reload(scope, false)
		return
	}
	e := t.log.WithField("scope", scope)
	if l := leaf(); l != nil {
		e = e.WithFields(certFields(l))
		t.m.Expiry(scope, l.NotAfter)
	}
	e.Info("TLS material reloaded: new connections use it")
	t.m.Reload(scope, true)
}

// watch polls the files until ctx is done.
func (t *tlsState) watch(ctx context.Context, cfg *config.Config) {
	if t.srv != nil {
		go tlsfiles.Watch(ctx, cfg.Server.TLS.ReloadInterval, func() { t.reloadServer(nil) })
	}
	// Always: a reload may add upstream.tls to a client that had none (a
	// client without it reloads nothing).
	go tlsfiles.Watch(ctx, cfg.Upstream.TLS.ReloadInterval, t.reloadUpstream)
}

func certFields(c *x509.Certificate) logrus.Fields {
	return logrus.Fields{"serial": c.SerialNumber.String(), "not_after": c.NotAfter.UTC().Format("2006-01-02T15:04:05Z"),
		"sha256": tlsfiles.Fingerprint(c), "subject": c.Subject.CommonName}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// reloadTLS is SIGHUP's TLS part, run whether or not the config loaded: the
// listener's files (with the new server.tls settings when g loaded) and
// the upstream client's (a replaced client loaded its files afresh).
func (r *reloader) reloadTLS(g *generation) {
	if r.tls == nil {
		return
	}
	var cfg *config.Config
	if g != nil {
		cfg = g.cfg
	}
	r.tls.reloadServer(cfg)
	if g == nil || g.up == r.cur.up {
		r.tls.reloadUpstream()
	} else {
		r.tls.setUpstream(g.up)
	}
}

// models is where GET /v1/models gets its list in this generation.
func (g *generation) models() front.ModelSource {
	return front.ModelSource{Static: g.cfg.Upstream.Models, List: g.up.ListModels}
}

// sameUpstream: the upstream client can be kept. upstream.models is read by
// the front only, so a new model list keeps the client (and its
// connections, health and prefix index).
func sameUpstream(a, b upstream.Config) bool {
	a.Models, b.Models = nil, nil
	return reflect.DeepEqual(a, b)
}
