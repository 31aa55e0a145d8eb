package engine_test

import (
	"encoding/json"
	"net/http/httptest"
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
		{"upstream 503", engine.UpstreamStatus(503, "", "", 0), 503, "server_error", "upstream_unavailable"},
		{"upstream 429 via UpstreamStatus", engine.UpstreamStatus(429, "m", "", 2), 429, "invalid_request_error", "upstream_rejected"},
		{"upstream 500 via UpstreamStatus", engine.UpstreamStatus(500, "", "", 0), 502, "upstream_error", "bad_gateway"},
		{"upstream 5xx / transport / unparseable 2xx", engine.Errorf(engine.KindBadGateway, ""), 502, "upstream_error", "bad_gateway"},
		{"protocol broken", engine.Errorf(engine.KindUpstreamProtocol, ""), 502, "upstream_error", "upstream_protocol_error"},
		{"ttfb expired", engine.Errorf(engine.KindUpstreamTimeout, ""), 504, "timeout_error", "upstream_timeout"},
		{"request deadline", engine.Errorf(engine.KindDeadline, ""), 504, "timeout_error", "deadline_exceeded"},
		{"draining", engine.Errorf(engine.KindShuttingDown, ""), 503, "server_error", "shutting_down"},
		{"panic / CEL runtime error", engine.Errorf(engine.KindInternal, ""), 500, "server_error", "internal_error"},
		{"GET /v1/models, no upstream answered", engine.Errorf(engine.KindModelsUnavailable, ""), 503, "upstream_error", "models_unavailable"},
		{"duplicate member name", engine.DuplicateKey("a.b", nil), 400, "invalid_request_error", "duplicate_key"},
		{"admission: queue full", engine.Errorf(engine.KindOverloaded, ""), 429, "rate_limit_error", "overloaded"},
		{"admission: queue timeout", engine.Errorf(engine.KindQueueTimeout, ""), 429, "rate_limit_error", "queue_timeout"},
		{"in flight when the shutdown budget ran out", engine.Errorf(engine.KindShutdownCut, ""), 503, "server_error", "shutdown_cut"},
	} {
		if s, ty, c := tc.err.HTTPStatus(), tc.err.Type(), tc.err.Code(); s != tc.status || ty != tc.typ || c != tc.code {
			t.Errorf("%s: %d %s %s, want %d %s %s", tc.row, s, ty, c, tc.status, tc.typ, tc.code)
		}
	}
}

// ACCEPTANCE 142, 152 (PROTOCOL 12 as changed this round): an upstream 503
// is written as 503 upstream_unavailable with Retry-After (the upstream's or
// 1 s), a 429 keeps its Retry-After, and a 4xx its string param.
func TestWriteErrorRetryAfterAndParam(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        *engine.Error
		status     int
		retryAfter string
		param      string
	}{
		{"503 default", engine.UpstreamStatus(503, "", "", 0), 503, "1", "null"},
		{"503 upstream's", engine.UpstreamStatus(503, "ignored", "ignored", 9), 503, "9", "null"},
		{"429 kept", engine.UpstreamStatus(429, "slow", "", 4), 429, "4", "null"},
		{"429 without", engine.UpstreamStatus(429, "slow", "", 0), 429, "", "null"},
		{"400 param", engine.UpstreamStatus(400, "too long", "messages", 7), 400, "", `"messages"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.err.Node = "decode"
			rec := httptest.NewRecorder()
			engine.WriteError(rec, tc.err, "r1")
			if rec.Code != tc.status || rec.Header().Get("Retry-After") != tc.retryAfter {
				t.Fatalf("status %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
			}
			var b struct {
				Error map[string]json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || len(b.Error) != 4 || string(b.Error["param"]) != tc.param {
				t.Fatalf("body %s", rec.Body.Bytes())
			}
		})
	}
}

// Issue 12: the bounded reasons of celflow_retries_total and the retry log.
func TestRetryReason(t *testing.T) {
	for _, tc := range []struct {
		err    *engine.Error
		status int
		want   string
	}{
		{engine.Errorf(engine.KindBadGateway, "unreachable"), 0, engine.RetryTransport},
		{engine.UpstreamStatus(500, "", "", 0), 500, engine.RetryStatus5xx},
		{engine.UpstreamStatus(503, "", "", 0), 503, engine.RetryUnavailable},
		{engine.UpstreamStatus(409, "", "", 0), 409, engine.RetryStatus4xx},
		{engine.Errorf(engine.KindBadGateway, "unparseable"), 200, engine.RetryBadReply},
		{engine.Errorf(engine.KindUpstreamTimeout, ""), 0, engine.RetryTimeout},
		{engine.Errorf(engine.KindUpstreamProtocol, ""), 200, engine.RetryProtocol},
		{engine.Errorf(engine.KindInternal, ""), 0, engine.RetryOther},
		{nil, 0, engine.RetryOther},
	} {
		if got := engine.RetryReason(tc.err, tc.status); got != tc.want {
			t.Errorf("%v/%d: %s, want %s", tc.err, tc.status, got, tc.want)
		}
	}
}
