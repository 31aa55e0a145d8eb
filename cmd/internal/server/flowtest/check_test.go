package flowtest

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"

	"github.com/celflow/celflow/connectors/upstream"
)

// hopByHop are the RFC 9110 hop-by-hop headers PROTOCOL 2.2 drops.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// checker collects protocol violations of one case.
type checker struct {
	c    *flowCase
	res  *result
	errs []string
}

func (k *checker) bad(f string, a ...any) { k.errs = append(k.errs, fmt.Sprintf(f, a...)) }

// checkInvariants applies the rules of PROTOCOL.md that hold in every flow,
// whatever the goldens say.
func checkInvariants(c *flowCase, res *result) []string {
	k := &checker{c: c, res: res}
	id := k.reply()
	client := clientHeader(c)
	for _, l := range res.legs {
		where := fmt.Sprintf("leg %d (%s %s)", l.seq, l.kind, l.path)
		if l.kind == "media" {
			k.media(where, l, client)
			continue
		}
		k.leg(where, l, id, client)
	}
	k.forbidden()
	k.order()
	k.overlap()
	return k.errs
}

func clientHeader(c *flowCase) http.Header {
	h := http.Header{}
	for _, kv := range c.Request.Headers {
		h.Add(kv[0], kv[1])
	}
	return h
}

// reply checks the client's reply and returns its request id.
func (k *checker) reply() string {
	resp := k.res.resp
	ids := resp.Header.Values("X-Request-Id")
	if len(ids) != 1 {
		k.bad("reply: want exactly one X-Request-Id, got %q (PROTOCOL 1.2)", ids)
		return ""
	}
	id := ids[0]
	sent := clientHeader(k.c).Values("X-Request-Id")
	switch {
	case len(sent) > 0 && validID(sent[0]):
		if id != sent[0] {
			k.bad("reply: X-Request-Id %q, want the client's %q (PROTOCOL 1.2)", id, sent[0])
		}
	case !reUUIDv4.MatchString(id):
		k.bad("reply: minted X-Request-Id %q is not a UUIDv4 (PROTOCOL 1.2)", id)
	}
	if resp.StatusCode >= 300 {
		k.errorShape(id)
	}
	return id
}

func validID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") == ""
}

// errorShape: exactly {"error":{"message","type","param":null,"code"}},
// Content-Type application/json, message ending with the request id
// (PROTOCOL 12, ACCEPTANCE 9 and 192).
func (k *checker) errorShape(id string) {
	if ct := k.res.resp.Header.Get("Content-Type"); ct != "application/json" {
		k.bad("error reply: Content-Type %q, want application/json (PROTOCOL 12)", ct)
	}
	var top map[string]map[string]json.RawMessage
	if err := json.Unmarshal(k.res.body, &top); err != nil || len(top) != 1 || len(top["error"]) != 4 {
		k.bad("error reply: body is not exactly {\"error\":{message,type,param,code}} (PROTOCOL 12)")
		return
	}
	e := top["error"]
	var msg, typ, code string
	if json.Unmarshal(e["message"], &msg) != nil || json.Unmarshal(e["type"], &typ) != nil ||
		json.Unmarshal(e["code"], &code) != nil {
		k.bad("error reply: message, type and code must be strings")
	}
	// param is null, or a string: an upstream 4xx's param, or the JSON path of a duplicate or reserved field.
	var param string
	if string(e["param"]) != "null" && ((code != "upstream_rejected" && code != "duplicate_key" && code != "reserved_field") || json.Unmarshal(e["param"], &param) != nil) {
		k.bad("error reply: param is %s, want null (or a string for upstream_rejected)", e["param"])
	}
	// An upstream 503 always carries Retry-After, in delta-seconds.
	ra := k.res.resp.Header.Values("Retry-After")
	if code == "upstream_unavailable" && (len(ra) != 1 || strings.Trim(ra[0], "0123456789") != "" || ra[0] == "") {
		k.bad("error reply: upstream_unavailable with Retry-After %q, want one delta-seconds value (PROTOCOL 12)", ra)
	}
	if !strings.HasSuffix(msg, "(request_id: "+id+")") {
		k.bad("error reply: message %q does not end with (request_id: %s) (PROTOCOL 12)", msg, id)
	}
}

// leg checks a render or worker leg (PROTOCOL 2.1, 2.2, 10, 13).
func (k *checker) leg(where string, l *leg, id string, client http.Header) {
	if l.method != http.MethodPost {
		k.bad("%s: method %s, want POST", where, l.method)
	}
	if v := l.header.Values("X-Request-Id"); len(v) != 1 || v[0] != id {
		k.bad("%s: X-Request-Id %q, want exactly [%q] (PROTOCOL 1.2)", where, v, id)
	}
	if v := l.header.Values("Content-Type"); len(v) != 1 || v[0] != "application/json" {
		k.bad("%s: Content-Type %q, want exactly application/json (PROTOCOL 2.1)", where, v)
	}
	if l.contentLength != int64(len(l.body)) {
		k.bad("%s: Content-Length %d for a %d-byte body (PROTOCOL 2.1)", where, l.contentLength, len(l.body))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(l.body, &top); err != nil {
		k.bad("%s: body is not a JSON object: %v", where, err)
	}
	prof := l.header.Values("Epp-Profile")
	prefer := l.header.Values("Prefer")
	switch l.kind {
	case "render":
		if len(prof) > 0 || len(prefer) > 0 {
			k.bad("%s: render got EPP-Profile %q / Prefer %q (PROTOCOL 2.1)", where, prof, prefer)
		}
	case "unknown":
		k.bad("%s: EPP-Profile %q is not encode, prefill or decode (PROTOCOL 2.1)", where, prof)
	default:
		if len(prof) != 1 {
			k.bad("%s: want exactly one EPP-Profile, got %q (PROTOCOL 2.1)", where, prof)
		}
		cd := l.kind == "conditional-decode"
		if cd && (len(prefer) != 1 || prefer[0] != "if-available") {
			k.bad("%s: Prefer %q, want exactly if-available (PROTOCOL 5)", where, prefer)
		}
		if !cd && len(prefer) > 0 {
			k.bad("%s: Prefer %q on a leg that is not conditional decode (PROTOCOL 2.2)", where, prefer)
		}
		// A named pool (decode-small) takes whatever legs a target rule sends it.
		if l.pool != "" && !namedPoolRE.MatchString(l.pool) && l.pool != strings.TrimPrefix(l.kind, "conditional-") {
			k.bad("%s: a %s leg landed on a %s endpoint", where, l.kind, l.pool)
		}
	}
	if l.kind == "encode" || l.kind == "prefill" {
		if string(top["stream"]) != "false" {
			k.bad("%s: top-level stream is %s, want false (PROTOCOL 13)", where, top["stream"])
		}
		if _, ok := top["stream_options"]; ok {
			k.bad("%s: stream_options present (PROTOCOL 7)", where)
		}
	}
	if l.kind != "prefill" && l.kind != "render" {
		if _, ok := top["ec_transfer_params"]; ok {
			k.bad("%s: ec_transfer_params outside prefill (PROTOCOL 10)", where)
		}
	}
	if room, ok := top["bootstrap_room"]; ok {
		n, good := new(big.Int).SetString(string(room), 10)
		if !good || n.Sign() < 0 || n.BitLen() > 63 {
			k.bad("%s: bootstrap_room %s is not an integer in [0, 2^63-1] (PROTOCOL 9)", where, room)
		}
	}
	for _, h := range dropped(client) {
		if v := l.header.Values(h); len(v) > 0 && !setByCelflow(h, l.kind) && !stampedByBroker(h, v, client) {
			k.bad("%s: header %s %q must be dropped (PROTOCOL 2.2)", where, h, v)
		}
	}
	k.forwarded(where, l, client)
	k.traceparent(where, l, client)
}

// dropped lists what PROTOCOL 2.2 drops from the client's headers: the
// hop-by-hop ones and every header naming a phase or an endpoint
// (upstream.OwnedHeaders, docs/threat-model.md).
func dropped(client http.Header) []string {
	out := append(append([]string(nil), upstream.OwnedHeaders...), hopByHop...)
	for _, v := range client.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = http.CanonicalHeaderKey(strings.TrimSpace(name)); name != "" {
				out = append(out, name)
			}
		}
	}
	return out
}

// stampedByBroker: celflow stamps its own values of some owned headers —
// the async-broker's objective and fairness id on every leg (ASYNC.md 2), a
// workflow's target rule's objective and X-Celflow-Pool — so such a value
// may appear as long as it is not the client's.
func stampedByBroker(h string, v []string, client http.Header) bool {
	switch h {
	case "X-Llm-D-Inference-Objective", "X-Llm-D-Inference-Fairness-Id", "X-Celflow-Pool":
		return !slices.Equal(v, client.Values(h))
	}
	return false
}

// setByCelflow: celflow stamps its own EPP-Profile on worker legs and Prefer
// on conditional decode; those names may appear, with celflow's value.
func setByCelflow(h, kind string) bool {
	switch h {
	case "Epp-Profile":
		return kind != "render"
	case "Prefer":
		return kind == "conditional-decode"
	}
	return false
}

// forwarded: every client header PROTOCOL 2.2 does not drop or replace
// reaches the leg whole, in order (ACCEPTANCE 14).
func (k *checker) forwarded(where string, l *leg, client http.Header) {
	skip := map[string]bool{"Host": true, "Content-Length": true, "Content-Type": true,
		"X-Request-Id": true, "Traceparent": true, "Tracestate": true}
	for _, h := range dropped(client) {
		skip[h] = true
	}
	for _, h := range k.c.TargetHeaders {
		skip[http.CanonicalHeaderKey(h)] = true
	}
	if l.kind == "render" || l.kind == "encode" || l.kind == "prefill" {
		skip["Accept-Encoding"] = true // celflow negotiates on these legs
	}
	for name, want := range client {
		if skip[name] {
			continue
		}
		if got := l.header.Values(name); strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			k.bad("%s: client header %s arrived as %q, want %q (PROTOCOL 2.2)", where, name, got, want)
		}
	}
}

// traceparent: tracing is on in this runner, so every render and worker leg
// carries exactly one, naming a celflow span of the client's trace when the
// client sent one (PROTOCOL 2.2).
func (k *checker) traceparent(where string, l *leg, client http.Header) {
	tp := l.header.Values("Traceparent")
	if len(tp) != 1 {
		k.bad("%s: want exactly one traceparent with tracing on, got %q (PROTOCOL 2.2)", where, tp)
		return
	}
	got := strings.Split(tp[0], "-")
	if len(got) != 4 || len(got[1]) != 32 || len(got[2]) != 16 {
		k.bad("%s: malformed traceparent %q", where, tp[0])
		return
	}
	if c := strings.Split(client.Get("Traceparent"), "-"); len(c) == 4 {
		if got[1] != c[1] {
			k.bad("%s: traceparent trace id %s, want the client's %s (PROTOCOL 2.2)", where, got[1], c[1])
		}
		if got[2] == c[2] {
			k.bad("%s: traceparent still names the client's span, not celflow's (PROTOCOL 2.2)", where)
		}
	}
}

// media: downloads carry no client header, no x-request-id and no
// traceparent (PROTOCOL 2.2).
func (k *checker) media(where string, l *leg, client http.Header) {
	if l.method != http.MethodGet {
		k.bad("%s: method %s, want GET", where, l.method)
	}
	for _, h := range []string{"X-Request-Id", "Traceparent", "Tracestate", "Epp-Profile", "Prefer"} {
		if len(l.header.Values(h)) > 0 {
			k.bad("%s: media download carries %s (PROTOCOL 2.2)", where, h)
		}
	}
	for name := range client {
		switch name {
		case "User-Agent", "Accept-Encoding", "Content-Type":
			continue // Go's own defaults may coincide
		}
		if len(l.header.Values(name)) > 0 {
			k.bad("%s: media download carries the client's %s (PROTOCOL 2.2)", where, name)
		}
	}
}

// forbidden: the case's marker strings reach no leg and no reply.
func (k *checker) forbidden() {
	for _, s := range k.c.Forbid {
		for _, l := range k.res.legs {
			if strings.Contains(string(l.body), s) || headerContains(l.header, s) {
				k.bad("forbidden %q reached leg %d (%s)", s, l.seq, l.kind)
			}
		}
		if strings.Contains(string(k.res.body), s) || headerContains(k.res.resp.Header, s) {
			k.bad("forbidden %q reached the client", s)
		}
	}
	for _, s := range k.c.ForbidLogs {
		if strings.Contains(k.res.logs, s) {
			k.bad("forbidden %q was logged (debug level)", s)
		}
	}
}

func headerContains(h http.Header, s string) bool {
	for _, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, s) {
				return true
			}
		}
	}
	return false
}

// order: legs of different kinds arrived in kind order, unless both kinds
// are declared concurrent (ACCEPTANCE 36: encode, prefill, decode in order).
func (k *checker) order() {
	conc := map[string]bool{}
	for _, c := range k.c.Concurrent {
		conc[c] = true
	}
	for _, a := range k.res.legs {
		for _, b := range k.res.legs {
			if a.seq < b.seq && kindRank(a.kind) > kindRank(b.kind) && !(conc[a.kind] && conc[b.kind]) {
				k.bad("leg %d (%s) arrived before leg %d (%s)", a.seq, a.kind, b.seq, b.kind)
			}
		}
	}
}

// overlap: some leg of each of the two kinds was in flight at the same time.
func (k *checker) overlap() {
	if len(k.c.Overlap) != 2 {
		return
	}
	for _, a := range k.res.legs {
		for _, b := range k.res.legs {
			if a.kind == k.c.Overlap[0] && b.kind == k.c.Overlap[1] &&
				a.start.Before(b.end) && b.start.Before(a.end) {
				return
			}
		}
	}
	k.bad("no %s leg was in flight together with a %s leg", k.c.Overlap[0], k.c.Overlap[1])
}
