package engine_test

import (
	"testing"

	"github.com/celflow/celflow/engine"
)

// ACCEPTANCE 193: every row of PROTOCOL.md section 12's error table, as the
// one Kind → status/type/code mapping gives it (the flow cases of
// testdata/flows/error-* reproduce the upstream rows end to end).
func TestErrorTable(t *testing.T) {
	rejected := func(status int) *engine.Error {
		e := engine.Errorf(engine.KindUpstreamRejected, "")
		e.Status = status
		return e
	}
	for _, tc := range []struct {
		row       string
		err       *engine.Error
		status    int
		typ, code string
	}{
		{"body not JSON", engine.Errorf(engine.KindInvalidJSON, ""), 400, "invalid_request_error", "invalid_json"},
		{"field validation", engine.Errorf(engine.KindInvalidRequest, ""), 400, "invalid_request_error", "invalid_request"},
		{"media rejected", engine.Errorf(engine.KindInvalidMedia, ""), 400, "invalid_request_error", "invalid_media"},
		{"media not obtainable", engine.Errorf(engine.KindMediaFetchFailed, ""), 400, "invalid_request_error", "media_fetch_failed"},
		{"body over the cap", engine.Errorf(engine.KindTooLarge, ""), 413, "invalid_request_error", "request_too_large"},
		{"unknown route", engine.Errorf(engine.KindNotFound, ""), 404, "invalid_request_error", "not_found"},
		{"wrong method", engine.Errorf(engine.KindMethodNotAllowed, ""), 405, "invalid_request_error", "method_not_allowed"},
		{"upstream 400", rejected(400), 400, "invalid_request_error", "upstream_rejected"},
		{"upstream 422", rejected(422), 422, "invalid_request_error", "upstream_rejected"},
		{"upstream 429", rejected(429), 429, "invalid_request_error", "upstream_rejected"},
		{"upstream 5xx / transport / unparseable 2xx", engine.Errorf(engine.KindBadGateway, ""), 502, "upstream_error", "bad_gateway"},
		{"protocol broken", engine.Errorf(engine.KindUpstreamProtocol, ""), 502, "upstream_error", "upstream_protocol_error"},
		{"ttfb expired", engine.Errorf(engine.KindUpstreamTimeout, ""), 504, "timeout_error", "upstream_timeout"},
		{"request deadline", engine.Errorf(engine.KindDeadline, ""), 504, "timeout_error", "deadline_exceeded"},
		{"draining", engine.Errorf(engine.KindShuttingDown, ""), 503, "server_error", "shutting_down"},
		{"panic / CEL runtime error", engine.Errorf(engine.KindInternal, ""), 500, "server_error", "internal_error"},
		{"duplicate member name", engine.DuplicateKey("a.b", nil), 400, "invalid_request_error", "duplicate_key"},
		{"admission: queue full", engine.Errorf(engine.KindOverloaded, ""), 429, "rate_limit_error", "overloaded"},
		{"admission: queue timeout", engine.Errorf(engine.KindQueueTimeout, ""), 429, "rate_limit_error", "queue_timeout"},
	} {
		if s, ty, c := tc.err.HTTPStatus(), tc.err.Type(), tc.err.Code(); s != tc.status || ty != tc.typ || c != tc.code {
			t.Errorf("%s: %d %s %s, want %d %s %s", tc.row, s, ty, c, tc.status, tc.typ, tc.code)
		}
	}
}
