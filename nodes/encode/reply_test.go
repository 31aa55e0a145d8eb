package encode

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

// featuresHash is the item hash a leg carries (tokens.features or features).
func featuresHash(body string) string {
	var req struct {
		Tokens   struct{ Features json.RawMessage } `json:"tokens"`
		Features json.RawMessage                    `json:"features"`
	}
	_ = json.Unmarshal([]byte(body), &req)
	f := req.Features
	if f == nil {
		f = req.Tokens.Features
	}
	var feats struct {
		MMHashes map[string][]string `json:"mm_hashes"`
	}
	_ = json.Unmarshal(f, &feats)
	return feats.MMHashes["image"][0]
}

// Issue 10: an encoder reply is checked like client input. Its
// ec_transfer_params must be keyed by the item's hash only (the leg sent it
// as the part's uuid); anything else is 502 upstream_protocol_error and is
// never merged, whatever the connector. Unusable params stay ignored
// (ACCEPTANCE 117, 123, in TestEncodeIgnoredParams).
func TestEncodeReplyKeys(t *testing.T) {
	desc := `{"peer_host":"10.0.0.1","peer_port":5501}`
	for _, tc := range []struct {
		name, connector string
		reply           func(hash string) string // for item h1; the others answer correctly
		wantErr         string                   // "" success
	}{
		{"own hash", "ec-nixl", func(h string) string { return `{"` + h + `":` + desc + `}` }, ""},
		{"another item's hash (img_0 for img_1)", "ec-nixl", func(string) string { return `{"h0":` + desc + `}` },
			"names another item's hash"},
		{"own hash plus another", "ec-nixl", func(h string) string { return `{"` + h + `":` + desc + `,"h2":` + desc + `}` },
			"names another item's hash"},
		{"own hash twice", "ec-nixl", func(h string) string { return `{"` + h + `":` + desc + `,"` + h + `":{"peer_host":"evil"}}` },
			"repeats a member name"},
		{"escaped own hash", "ec-nixl", func(string) string { return `{"\u0068\u0031":` + desc + `}` }, ""},
		{"shared storage checks too", "ec-shared-storage", func(string) string { return `{"h0":` + desc + `}` },
			"names another item's hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, func(body string) (int, string, time.Duration) {
				h := featuresHash(body)
				if h == "h1" {
					return 200, `{"id":"x","ec_transfer_params":` + tc.reply(h) + `}`, 0
				}
				return 200, `{"id":"x","ec_transfer_params":{"` + h + `":` + desc + `}}`, 0
			})
			n := buildNode(t, w.URL, `"ec_connector":"`+tc.connector+`"`, engine.Defaults{})
			req, prep := state(t)
			res, merged, r := fanOut(n, req, prep)
			e := engine.AsError(res[1].Err)
			if tc.wantErr == "" {
				if e != nil || merged.Err != nil {
					t.Fatalf("item 1: %v, merge %v", e, merged.Err)
				}
				if tc.connector == "ec-nixl" && !strings.Contains(string(handoff.EC.Value(r)), `"h1":`) {
					t.Errorf("EC %s", handoff.EC.Value(r))
				}
				return
			}
			if e == nil || e.Kind != engine.KindUpstreamProtocol || e.HTTPStatus() != 502 || e.Code() != "upstream_protocol_error" ||
				!strings.Contains(e.Msg, tc.wantErr) {
				t.Fatalf("item 1: %v", e)
			}
			if msg := e.ClientMessage("r"); strings.Contains(msg, "h0") || strings.Contains(msg, "evil") {
				t.Errorf("a reply key reached the client message: %s", msg)
			}
			n.store(&engine.Exec{Run: r, NodeID: "encode"}).mu.Lock()
			_, kept := n.store(&engine.Exec{Run: r, NodeID: "encode"}).by[1]
			n.store(&engine.Exec{Run: r, NodeID: "encode"}).mu.Unlock()
			if kept {
				t.Error("the refused reply was recorded for the merge")
			}
		})
	}
}

// The params schema, idle_timeout and body_timeout included (ACCEPTANCE 21).
func TestSchema(t *testing.T) {
	legtest.CheckSchema(t, TypeName, schemaJSON,
		[]string{`{}`, `{"ttfb_timeout":"60s","ec_connector":"ec-nixl","format":"tokens-in","idle_timeout":"5s","body_timeout":"0"}`},
		[]string{`{"idle_timeout":"5"}`, `{"body_timeout":30}`, `{"uuid":true}`})
}
