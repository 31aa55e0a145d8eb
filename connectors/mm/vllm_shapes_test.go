package mm

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/celflow/celflow/internal/jsonb"
)

// vllmShapes is testdata/vllm_shapes.json: one row per content-part shape
// vLLM's chat parser reads as media (vllm/entrypoints/chat_utils.py,
// MM_PARSER_MAP and the typeless branch of _parse_chat_message_content_mm_part,
// at the commit the file names), with celflow's outcome. The server's
// flowtest runs the same rows against celflow sim workers.
type vllmShapes struct {
	VLLM            string   `json:"vllm"`
	ParserMap       []string `json:"parser_map"`
	TypelessMembers []string `json:"typeless_members"`
	NotMedia        []string `json:"not_media"`
	Rows            []struct {
		Name     string          `json:"name"`
		Mirrors  string          `json:"mirrors"`
		Part     json.RawMessage `json:"part"`
		Outcome  string          `json:"outcome"`
		Modality string          `json:"modality"`
		Wrap     bool            `json:"wrap"`
	} `json:"rows"`
}

// TestScanPartsFollowsVLLM: every shape vLLM reads as media is found (to
// be fetched, or inline) or refused with the part's path; the rest is
// skipped as before (ACCEPTANCE 68).
func TestScanPartsFollowsVLLM(t *testing.T) {
	raw, err := os.ReadFile("testdata/vllm_shapes.json")
	if err != nil {
		t.Fatal(err)
	}
	var tab vllmShapes
	if err := json.Unmarshal(raw, &tab); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.VLLM, "chat_utils.py") || len(tab.Rows) == 0 {
		t.Fatalf("table header %q, %d rows", tab.VLLM, len(tab.Rows))
	}
	// Every part type and typeless member vLLM reads is either not media
	// or has a row: a name copied from a newer vLLM shows up here.
	notMedia := map[string]bool{}
	for _, n := range tab.NotMedia {
		notMedia[n] = true
	}
	covered := map[string]bool{}
	for _, r := range tab.Rows {
		var part map[string]json.RawMessage
		if err := json.Unmarshal(r.Part, &part); err != nil {
			t.Fatalf("row %q: %v", r.Name, err)
		}
		var typ string
		if json.Unmarshal(part["type"], &typ) == nil && typ != "" {
			covered[typ] = true
		}
		if _, ok := part["type"]; !ok {
			for k := range part {
				covered[k] = true
			}
		}
	}
	for _, n := range append(append([]string(nil), tab.ParserMap...), tab.TypelessMembers...) {
		if !notMedia[n] && !covered[n] {
			t.Errorf("vLLM reads %q as media and no row covers it (testdata/vllm_shapes.json)", n)
		}
	}
	if len(tab.ParserMap) == 0 || len(tab.TypelessMembers) == 0 {
		t.Fatal("the table lists no vLLM names")
	}

	const url = "http://media.test/x"
	for _, r := range tab.Rows {
		t.Run(r.Name, func(t *testing.T) {
			if r.Mirrors == "" {
				t.Fatal("a row names the vLLM code it mirrors")
			}
			part := strings.ReplaceAll(string(r.Part), "MEDIA_URL", url)
			// The part is the second of the second message's content.
			body := []byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"t"},` + part + `]}]}`)
			obj, err := jsonb.Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range []*jsonb.Object{obj, nil} {
				parts, err := ScanParts(body, o)
				switch r.Outcome {
				case "refused":
					var me *Error
					if !errors.As(err, &me) || me.Kind != BadRequest || me.Param != "messages[1].content[1]" ||
						me.EngineError().HTTPStatus() != 400 || me.EngineError().Param != me.Param {
						t.Fatalf("err %v (%#v), want a 400 for messages[1].content[1]", err, me)
					}
					if strings.Contains(err.Error(), url) {
						t.Errorf("message repeats the url: %v", err)
					}
					continue
				case "skipped":
					if err != nil || len(parts) != 0 {
						t.Fatalf("parts %+v err %v, want none", parts, err)
					}
					continue
				}
				if err != nil || len(parts) != 1 {
					t.Fatalf("parts %+v err %v, want one", parts, err)
				}
				p := parts[0]
				if p.Modality != r.Modality || p.Inline(body) != (r.Outcome == "inline") || p.WrapOnRewrite() != r.Wrap {
					t.Fatalf("part %+v, want %s %s wrap=%v", p, r.Outcome, r.Modality, r.Wrap)
				}
				if r.Outcome == "fetched" {
					if v, _ := Unquote(body[p.ValStart:p.ValEnd]); string(v) != url {
						t.Fatalf("url range %q", body[p.ValStart:p.ValEnd])
					}
				}
				if q, ok := PartAt(body, p.PartStart, p.PartEnd); !ok || q != p {
					t.Fatalf("PartAt %+v %v", q, ok)
				}
			}
		})
	}
}
