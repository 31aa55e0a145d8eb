package upstream

import (
	"net/http"
	"net/textproto"
	"strings"
)

// ForwardHeaders copies the client's headers src onto a leg's headers dst
// per docs/protocol.md (Client headers on render and worker legs):
// hop-by-hop headers (and any named in Connection), Host,
// Content-Length, Content-Type, X-Request-Id and the OwnedHeaders are
// dropped (celflow stamps its own EPP-Profile and Prefer after this, and
// any owned header it sets must be stamped after it too); Accept-Encoding is dropped unless relay (decode and
// conditional-decode keep the client's). Everything else passes, each
// multi-valued header whole and in order; traceparent/tracestate pass too
// (Send replaces them when the leg carries its own).
//
// To stay allocation-light, dst shares the value slices of src, capped so
// that an append to dst never writes into src; neither must be modified in
// place afterwards.
func ForwardHeaders(dst, src http.Header, relay bool) { forwardHeaders(dst, src, relay, nil) }

// forwardHeaders is ForwardHeaders that also drops the operator's extra
// owned names (trust.owned_headers, canonical keys).
func forwardHeaders(dst, src http.Header, relay bool, extra map[string]struct{}) {
	conn := connectionValues(src)
	for k, vs := range src {
		ck := textproto.CanonicalMIMEHeaderKey(k) // no allocation when canonical
		if dropOnLeg(ck, relay) || namedIn(conn, ck) {
			continue
		}
		if _, owned := extra[ck]; owned {
			continue
		}
		if old := dst[ck]; len(old) > 0 {
			dst[ck] = append(old[:len(old):len(old)], vs...)
		} else {
			dst[ck] = vs[:len(vs):len(vs)]
		}
	}
}

// hopByHop reports RFC 9110 hop-by-hop headers (canonical names), plus the
// non-standard Proxy-Connection that proxies also treat as one.
func hopByHop(ck string) bool {
	switch ck {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Connection":
		return true
	}
	return false
}

// OwnedHeaders are the client headers that name a phase or an endpoint:
// celflow's, never forwarded from the client on any leg (docs/threat-model.md).
// EPP-Profile and Prefer (docs/protocol.md); the Gateway API Inference
// Extension's endpoint-picker protocol headers (the destination the proxy
// routes to, the subset it may pick from, the endpoint that served);
// llm-d's P/D and E/PD sidecar headers naming the prefill and encode
// workers to use; llm-d's objective and fairness headers, which celflow or
// its dispatcher stamp (docs/async.md, Client API). Canonical form.
var OwnedHeaders = []string{
	"Epp-Profile", "Prefer",
	"X-Gateway-Destination-Endpoint", "X-Gateway-Destination-Endpoint-Subset", "X-Gateway-Destination-Endpoint-Served",
	"X-Prefiller-Host-Port", "X-Encoder-Hosts-Ports",
	"X-Llm-D-Inference-Objective", "X-Llm-D-Inference-Fairness-Id",
	// The Inference Extension's own objective and fairness headers: the
	// endpoint picker maps the objective to a priority.
	"X-Gateway-Inference-Objective", "X-Gateway-Inference-Fairness-Id",
	"X-Celflow-Pool", // PoolHeader: the pool a target rule chose (gateway mode)
}

func dropOnLeg(ck string, relay bool) bool {
	switch ck {
	case "Host", "Content-Length", "Content-Type", "X-Request-Id":
		return true
	case "Epp-Profile", "Prefer",
		"X-Gateway-Destination-Endpoint", "X-Gateway-Destination-Endpoint-Subset", "X-Gateway-Destination-Endpoint-Served",
		"X-Prefiller-Host-Port", "X-Encoder-Hosts-Ports",
		"X-Llm-D-Inference-Objective", "X-Llm-D-Inference-Fairness-Id", "X-Celflow-Pool",
		"X-Gateway-Inference-Objective", "X-Gateway-Inference-Fairness-Id":
		return true // OwnedHeaders
	case "Accept-Encoding":
		return !relay
	}
	return hopByHop(ck)
}

// connectionValues finds the Connection header even under a non-canonical
// key (a hand-built header map); net/http's are canonical.
func connectionValues(h http.Header) []string {
	if v, ok := h["Connection"]; ok {
		return v
	}
	for k, v := range h {
		if len(k) == len("Connection") && strings.EqualFold(k, "Connection") {
			return v
		}
	}
	return nil
}

// namedIn reports whether the Connection header values conn name ck.
func namedIn(conn []string, ck string) bool {
	for _, v := range conn {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(tok), ck) {
				return true
			}
		}
	}
	return false
}

// copyReplyHeaders copies an upstream reply's headers to the client minus
// hop-by-hop ones (docs/protocol.md, Headers back to the client);
// X-Request-Id is the caller's to set.
// Value slices are shared with src (capped), as in ForwardHeaders.
func copyReplyHeaders(dst, src http.Header) {
	conn := connectionValues(src)
	for k, vs := range src {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if hopByHop(ck) || ck == "X-Request-Id" || namedIn(conn, ck) {
			continue
		}
		dst[ck] = vs[:len(vs):len(vs)] // the upstream's value wins
	}
}
