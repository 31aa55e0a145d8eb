// Package flowtest is the golden runner for whole flows: a shipped (or
// inline) workflow, the real HTTP front, every node type of nodes/all and
// the real upstream client, against httptest fakes on 127.0.0.1 that play
// render, the Inference Gateway (or each direct-pool endpoint) and a media
// host. The package is test-only; this file documents the case format.
//
// Run `go test ./cmd/internal/server/flowtest` to check every case, and
// `go test ./cmd/internal/server/flowtest -update` to rewrite the goldens (then review
// each diff by hand against docs/protocol.md: a golden that pins a protocol bug is
// worse than none). `-run 'TestFlows/<name>'` runs one case.
//
// # Cases
//
// Each case is a directory testdata/flows/<name>/ (at the repository root)
// holding case.yaml, legs.golden and response.golden. case.yaml is decoded
// strictly (an unknown key fails the case):
//
//	acceptance: [133, 138]          # docs/acceptance.md items the case covers
//	notes: what the case pins
//	workflow: workflows/pd.yaml     # repository-relative, or:
//	workflow_inline: |              # a whole workflow document
//	defaults: {kv_connector: kv-shared-storage}   # merged into the workflow's defaults
//	params: {fetch: {allow_loopback: true}}       # node id → params merged into the node's
//	env: {SGLANG_BOOTSTRAP_PORT: "9100"}           # set for the load and the run
//	upstream:
//	  mode: gateway                 # default; or direct with pools
//	  pools: {prefill: [{bootstrap_port: 9000}], decode: [{}]}
//	  short_prompt_tokens: 0
//	media: {/cat.png: {type: image/png, base64: iVBO…}}   # served by the media fake
//	request:
//	  route: chat                   # chat | completions | generate (or path: /x)
//	  headers: [[X-Custom, a], [X-Custom, b]]          # sent in this order
//	  body: '{"model":"m","seed":12345678901234567890}' # raw bytes, trailing newlines cut
//	replies:                        # scripted answers, see below
//	  - {leg: prefill, status: 200, body: '{"kv_transfer_params":{…}}'}
//	concurrent: [prefill, decode]   # leg kinds whose relative order is not pinned
//	overlap: [prefill, decode]      # two kinds that must have been in flight together
//	forbid: [MARKER]                # strings that must reach no leg and no reply
//	target_headers: [x-route-hint]  # client headers the workflow's target rules set (never forwarded)
//	forbid_logs: [MARKER]           # strings that must not be logged (debug level)
//	unpinned: [prefill]             # nodes whose outcome is timing-dependent
//	min_legs: 2                     # wait until this many legs arrived
//	xfail: {reason, file, want, got}  # a known deviation, see below
//
// Every render node's address is set to the render fake unless params set
// it. `{{media}}` in the request body is the media fake's base URL.
//
// # Legs and replies
//
// Each call a fake receives is one leg of a kind: media (the media fake),
// render (the render fake), and for worker targets the EPP-Profile value,
// where a decode leg carrying Prefer is conditional-decode. A leg takes the
// first unused reply of its kind whose `endpoint` (direct mode: "prefill0" is the first prefill endpoint)
// and `contains` (a substring of the leg body) match; when all matching
// replies are used, the last one repeats (retries). An unscripted leg gets a
// 500. A reply has status (default 200), headers (pairs), body, delay
// (before the headers), optionally chunks (written and flushed one by one,
// chunk_delay apart, instead of body), gzip (compress the body, set
// Content-Encoding) or hangup (close the connection without an answer). In
// legs.golden a leg shows "reply hangup", or "reply none (cancelled by
// celflow)" when celflow cancelled it before the scripted reply.
//
// # Goldens and normalisation
//
// legs.golden lists every leg, sorted by kind (media, render,
// conditional-decode, encode, prefill, decode), then by body, then by
// arrival; the runner separately checks that legs of different kinds
// arrived in that order unless both kinds are listed in `concurrent`. Each
// leg shows method, path, target, the reply status, every header the fake
// received except Content-Length (checked against the body instead) and the
// exact body bytes. response.golden shows the client's status, headers
// (without Date) and body (base64 when it is not UTF-8, e.g. gzip), the
// load warnings if any, then each node's outcome from the run report.
//
// Nondeterministic values are replaced, numbered by first appearance in the
// golden text, so that equal values stay visibly equal:
//   - fake base URLs http://127.0.0.1:<port> become http://<name> (render,
//     gateway, media, prefill0, decode1, …);
//   - UUIDs become <UUID1>, <UUID2>… (the runner checks each is a version 4);
//   - "bootstrap_room":<integer> becomes "bootstrap_room":<ROOM1>… (the runner
//     checks it is a JSON integer in [0, 2^63−1]);
//   - in traceparent, a trace id other than the client's becomes <TRACE1>…,
//     and a span id other than the client's becomes <SPAN1>….
//
// # Protocol invariants
//
// Whatever the goldens say, the runner fails a case when a leg or the reply
// breaks a rule of PROTOCOL.md that holds for every flow (check_test.go):
// x-request-id, Content-Type, EPP-Profile, Prefer, hop-by-hop and traceparent
// rules (2.1–2.3), stream:false on encode and prefill (13), no
// ec_transfer_params outside prefill (10), media downloads without client
// headers (2.2), and the exact error shape with the request id (12).
//
// # Known deviations
//
// A golden never pins a protocol bug. When celflow is known to break
// docs/protocol.md in a case, the golden holds the correct line (xfail.want) and
// xfail.got the line celflow produces: the case is skipped with the reason
// while exactly that difference remains, and fails once celflow is fixed
// (remove the entry) or when anything else differs. -update writes want.
package flowtest
