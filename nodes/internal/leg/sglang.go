package leg

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// SGLangSession is the key of a request's SGLang session: a rendezvous
// (engine.Key.Meet) that the concurrent prefill and a kv-sglang decode both
// provide, so the compiler sees their coupling.
var SGLangSession = engine.NewKey[*SGLang]("sglang").Meet()

// SGLang is one request's kv-sglang rendezvous in the concurrent shape
// (docs/protocol.md, kv-sglang): the prefill and decode nodes run with no edge between them
// and meet here. Whichever runs first makes it: the room is drawn and the
// prefill endpoint picked once, so both legs carry the same three fields.
//
// It also carries the one cross-node rule of the shape: a prefill failure
// before decode's reply started cancels decode, and the client gets
// prefill's error; after that, the failure is only recorded.
type SGLang struct {
	Room uint64 // uniform in [0, 2^63-1]
	Host string // the picked prefill endpoint's host
	Port int    // its bootstrap port, else SGLANG_BOOTSTRAP_PORT / 8998
	// Target is the picked prefill endpoint; the prefill node sends its leg
	// there and calls Done. Nil when the pick failed (PickErr).
	Target  *upstream.Target
	PickErr *engine.Error

	mu           sync.Mutex
	decodeCancel context.CancelCauseFunc
	started      bool          // decode's reply started
	prefillErr   *engine.Error // prefill failed before that
}

// NewRoom draws a bootstrap room: a uniform integer in [0, 2^63-1].
func NewRoom() uint64 { return rand.Uint64() >> 1 }

// Session returns the request's SGLang session, making it on first use:
// the room is drawn and, with c non-nil, a prefill endpoint picked. port is
// the configured bootstrap port (used when the endpoint lists none).
func Session(x *engine.Exec, c *upstream.Client, port int) *SGLang {
	return SGLangSession.GetOrMake(x.Run, func() *SGLang {
		s := &SGLang{Room: NewRoom(), Port: port}
		if c == nil {
			return s
		}
		t, e := Pick(c, upstream.RolePrefill)
		if e != nil {
			s.PickErr = e
			return s
		}
		s.Target, s.Host = t, t.Host
		if t.Endpoint != nil && t.Endpoint.BootstrapPort > 0 {
			s.Port = t.Endpoint.BootstrapPort
		}
		return s
	})
}

// JoinDecode registers decode's cancel func. It returns prefill's error when
// prefill already failed: decode must then not be sent.
func (s *SGLang) JoinDecode(cancel context.CancelCauseFunc) *engine.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prefillErr != nil {
		return s.prefillErr
	}
	s.decodeCancel = cancel
	return nil
}

// DecodeStarted marks decode's reply as started (its 2xx headers arrived).
// It returns prefill's error when prefill failed first: decode must then
// drop its reply and report that error.
func (s *SGLang) DecodeStarted() *engine.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prefillErr != nil {
		return s.prefillErr
	}
	s.started = true
	return nil
}

// PrefillFailed records the failure of prefill node `node`. Before decode's
// reply started it cancels decode (with the error as the cause) and reports
// true; after, it reports false and the failure is only recorded on
// prefill's own outcome. A copy of e is kept, named after node, so decode
// can return it as is ("prefill: ...") while the engine handles e.
func (s *SGLang) PrefillFailed(node string, e *engine.Error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.prefillErr != nil {
		return false
	}
	cp := *e
	if cp.Node == "" {
		cp.Node = node
	}
	e = &cp
	s.prefillErr = e
	if s.decodeCancel != nil {
		s.decodeCancel(e)
	}
	return true
}

// PrefillErr is prefill's error when it failed before decode's reply started.
func (s *SGLang) PrefillErr() *engine.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prefillErr
}

// SetBootstrap sets SGLang's bootstrap fields at the top level of a leg body
// (docs/protocol.md, kv-sglang): bootstrap_host (left out when host is "", the sequential
// prefill), bootstrap_port and bootstrap_room as JSON integers.
func SetBootstrap(oe *jsonb.ObjectEditor, host string, port int, room uint64) {
	if host != "" {
		oe.Set("bootstrap_host", jsonb.Quote(host))
	}
	oe.Set("bootstrap_port", strconv.AppendInt(nil, int64(port), 10))
	oe.Set("bootstrap_room", strconv.AppendUint(nil, room, 10))
}
