package front

import (
	"net/http"

	"github.com/google/uuid"
)

// MaxRequestIDLen is the longest inbound x-request-id kept (docs/protocol.md,
// Request id).
const MaxRequestIDLen = 128

// requestID returns the canonical id of a request: the client's
// x-request-id when it matches ^[a-zA-Z0-9-]{1,128}$, else a fresh UUIDv4.
// rejected is -1 when the client's value was kept or absent, else the
// length of the rejected value: only that length may be logged, never the
// value itself.
func requestID(h http.Header) (id string, rejected int) {
	vs := h["X-Request-Id"]
	if len(vs) == 0 {
		return uuid.NewString(), -1
	}
	if validID(vs[0]) {
		return vs[0], -1
	}
	return uuid.NewString(), len(vs[0])
}

// canonicalID is requestID, and drops a rejected client value from h: it
// must never travel further (CEL, logs, legs).
func canonicalID(h http.Header) (id string, rejected int) {
	id, rejected = requestID(h)
	if rejected >= 0 {
		h.Del("X-Request-Id")
	}
	return id, rejected
}

// validID is the request id pattern [a-zA-Z0-9-]{1,128}, without a regexp on the hot path.
func validID(s string) bool {
	if len(s) == 0 || len(s) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
