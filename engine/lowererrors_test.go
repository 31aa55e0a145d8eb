package engine_test

import (
	"fmt"
	"testing"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// Domain packages (mm, jsonb) return their own errors; AsError gives each
// its kind (mm's through engine.Classified), so a node can return them as
// they are, wrapped or not.
func TestAsErrorLower(t *testing.T) {
	_, dupErr := jsonb.Parse([]byte(`{"a":{"b":1,"b":2}}`))
	for _, tc := range []struct {
		err   error
		kind  engine.Kind
		param string
	}{
		{&mm.Error{Kind: mm.BadRequest, Msg: "token_ids: required"}, engine.KindInvalidRequest, ""},
		{&mm.Error{Kind: mm.NotJSON, Msg: "x"}, engine.KindInvalidJSON, ""},
		{&mm.Error{Kind: mm.BadReply, Msg: "x", Cause: dupErr}, engine.KindUpstreamProtocol, ""},
		{dupErr, engine.KindDuplicateKey, "a.b"},
		{fmt.Errorf("render: %w", &mm.Error{Kind: mm.BadReply, Msg: "x"}), engine.KindUpstreamProtocol, ""},
		{fmt.Errorf("body: %w", dupErr), engine.KindDuplicateKey, "a.b"},
	} {
		e := engine.AsError(tc.err)
		if e.Kind != tc.kind || e.Param != tc.param {
			t.Errorf("%v: kind %v param %q, want %v %q", tc.err, e.Kind, e.Param, tc.kind, tc.param)
		}
	}
	if _, _, err := mm.ParseGenerate([]byte(`{"token_ids":[1],"token_ids":[2]}`), nil); engine.AsError(err).Code() != "duplicate_key" {
		t.Errorf("generate duplicate: %v", err)
	}
}
