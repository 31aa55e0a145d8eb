package sim

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const nixlPrefillKV = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// flipKV turns a prefill reply's kv_transfer_params into decode's, as the
// kv-nixl connector does (PROTOCOL.md section 9).
func flipKV(t *testing.T, reply []byte) string {
	t.Helper()
	var r struct {
		KV map[string]json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(reply, &r); err != nil || r.KV == nil {
		t.Fatalf("no kv_transfer_params in %s", reply)
	}
	r.KV["do_remote_decode"], r.KV["do_remote_prefill"] = json.RawMessage("false"), json.RawMessage("true")
	b, _ := json.Marshal(r.KV)
	return string(b)
}

func port(t *testing.T, srv string) int {
	u, _ := url.Parse(srv)
	p, _ := strconv.Atoi(u.Port())
	return p
}

// kv-nixl: decode pulls the KV from the prefill worker named in the params
// (GET /sim/kv/<remote_request_id>) and answers 400 when it cannot.
func TestNixlHandoff(t *testing.T) {
	_, pre := startWorker(t, Config{Name: "p1", Roles: []Role{RolePrefill}})
	_, dec := startWorker(t, Config{Name: "d1", Roles: []Role{RoleDecode}})
	chat := func(text, extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"` + text + `"}],"max_tokens":1,"stream":false` + extra + `}`
	}
	status, _, b := post(t, pre.URL+"/v1/chat/completions", chat("hello nixl", `,"kv_transfer_params":`+nixlPrefillKV), "EPP-Profile: prefill")
	if status != http.StatusOK {
		t.Fatalf("prefill: %d %s", status, b)
	}
	var r struct {
		KV nixlParams `json:"kv_transfer_params"`
	}
	json.Unmarshal(b, &r)
	kv := r.KV
	if !kv.DoRemotePrefill || kv.DoRemoteDecode || kv.RemoteHost != "127.0.0.1" || kv.RemotePort != port(t, pre.URL) ||
		!strings.HasPrefix(kv.RemoteRequestID, "rr-") || kv.RemoteEngineID != "sim-p1" || kv.TPSize != 1 || len(kv.RemoteBlockIDs) != 1 {
		t.Errorf("prefill kv_transfer_params: %s", b)
	}
	good := flipKV(t, b)
	cases := []struct {
		name, body string
		status     int
		want       string
	}{
		{"pulls the KV", chat("hello nixl", `,"kv_transfer_params":`+good), 200, ""},
		{"another prompt", chat("other prompt", `,"kv_transfer_params":`+good), 400, "KV of another prompt"},
		{"unknown id", chat("hello nixl", `,"kv_transfer_params":`+strings.Replace(good, kv.RemoteRequestID, "rr-nope", 1)), 400, "rr-nope"},
		{"missing host", chat("hello nixl", `,"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"x"}`), 400, "needs remote_host"},
		{"no kv params: aggregated", chat("hello nixl", ""), 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, _, b := post(t, dec.URL+"/v1/chat/completions", tc.body, "EPP-Profile: decode")
			if status != tc.status || (tc.want != "" && !strings.Contains(errorMessage(t, b), tc.want)) {
				t.Errorf("status %d, want %d (%q): %s", status, tc.status, tc.want, b)
			}
		})
	}
}

// Generate reads transfer params from sampling_params.extra_args only.
func TestGenerateHandoff(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RolePrefill, RoleDecode}})
	top := `{"token_ids":[1,2,3],"sampling_params":{"max_tokens":1},"kv_transfer_params":` + nixlPrefillKV + `}`
	_, _, b := post(t, srv.URL+"/inference/v1/generate", top, "EPP-Profile: prefill")
	if m := decodeJSON(t, b); m["kv_transfer_params"] != nil {
		t.Errorf("top-level kv params were not ignored: %s", b)
	}
	nested := `{"request_id":"req-9","token_ids":[1,2,3],"sampling_params":{"max_tokens":1,"extra_args":{"kv_transfer_params":` + nixlPrefillKV + `}}}`
	status, _, b := post(t, srv.URL+"/inference/v1/generate", nested, "EPP-Profile: prefill")
	m := decodeJSON(t, b)
	if status != 200 || m["request_id"] != "req-9" || m["kv_transfer_params"] == nil {
		t.Fatalf("generate prefill: %d %s", status, b)
	}
	ch := m["choices"].([]any)[0].(map[string]any)
	if ch["finish_reason"] != "length" || len(ch["token_ids"].([]any)) != 1 {
		t.Errorf("generate choice: %v", ch)
	}
	dec := `{"token_ids":[1,2,3],"sampling_params":{"max_tokens":50,"extra_args":{"kv_transfer_params":` + flipKV(t, b) + `}}}`
	if status, _, b := post(t, srv.URL+"/inference/v1/generate", dec, "EPP-Profile: decode"); status != 200 {
		t.Errorf("generate decode: %d %s", status, b)
	}
}

// kv-shared-storage: prefill writes the KV under --shared-dir keyed by the
// prompt; decode checks the file exists.
func TestSharedStorageHandoff(t *testing.T) {
	dir := t.TempDir()
	_, pre := startWorker(t, Config{Roles: []Role{RolePrefill}, SharedDir: dir})
	_, dec := startWorker(t, Config{Roles: []Role{RoleDecode}, SharedDir: dir})
	_, elsewhere := startWorker(t, Config{Roles: []Role{RoleDecode}})
	prompt := `{"prompt":"shared kv please","max_tokens":1,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`
	status, _, b := post(t, pre.URL+"/v1/completions", prompt, "EPP-Profile: prefill")
	if status != 200 || decodeJSON(t, b)["kv_transfer_params"] != nil {
		t.Fatalf("prefill: %d %s", status, b)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.kv")); len(files) != 1 {
		t.Fatalf("kv files: %v", files)
	}
	decode := func(p string) string {
		return `{"prompt":"` + p + `","max_tokens":4,"kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true}}`
	}
	if status, _, b := post(t, dec.URL+"/v1/completions", decode("shared kv please"), "EPP-Profile: decode"); status != 200 {
		t.Errorf("decode: %d %s", status, b)
	}
	for name, srv := range map[string]string{"other prompt": dec.URL, "other dir": elsewhere.URL} {
		p := "shared kv please"
		if name == "other prompt" {
			p = "never prefilled"
		}
		status, _, b := post(t, srv+"/v1/completions", decode(p), "EPP-Profile: decode")
		if status != 400 || !strings.Contains(errorMessage(t, b), "shared storage") {
			t.Errorf("%s: %d %s", name, status, b)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

// kv-sglang: prefill and decode meet in a room, in either order; a prefill
// that nobody joins fails after BootstrapWait; BootstrapWait 0 answers early.
func TestSGLangRooms(t *testing.T) {
	pw, pre := startWorker(t, Config{Roles: []Role{RolePrefill}, BootstrapWait: 5 * time.Second})
	pw.joinWait = 5 * time.Second
	_, dec := startWorker(t, Config{Roles: []Role{RoleDecode}})
	body := func(room int, host bool) string {
		s := `{"model":"m","messages":[{"role":"user","content":"sglang"}],"max_tokens":2,"bootstrap_port":` + strconv.Itoa(port(t, pre.URL)) + `,"bootstrap_room":` + strconv.Itoa(room)
		if host {
			s += `,"bootstrap_host":"127.0.0.1"`
		}
		return s + "}"
	}
	for _, decodeFirst := range []bool{false, true} {
		room := 7
		if decodeFirst {
			room = 8
		}
		var wg sync.WaitGroup
		var pStatus, dStatus int
		var pBody, dBody []byte
		wg.Add(2)
		go func() {
			defer wg.Done()
			pStatus, _, pBody = post(t, pre.URL+"/v1/chat/completions", body(room, false), "EPP-Profile: prefill")
		}()
		if decodeFirst {
			go func() {
				defer wg.Done()
				dStatus, _, dBody = post(t, dec.URL+"/v1/chat/completions", body(room, true), "EPP-Profile: decode")
			}()
		} else {
			// prefill waits in its room until decode joins
			waitRecords(t, pw.Records(), func(p RecordsPage) bool { return len(p.Records) > 0 })
			go func() {
				defer wg.Done()
				dStatus, _, dBody = post(t, dec.URL+"/v1/chat/completions", body(room, true), "EPP-Profile: decode")
			}()
		}
		wg.Wait()
		if pStatus != 200 || dStatus != 200 {
			t.Fatalf("decodeFirst=%v: prefill %d %s, decode %d %s", decodeFirst, pStatus, pBody, dStatus, dBody)
		}
		m := decodeJSON(t, pBody)
		if m["bootstrap_host"] != "127.0.0.1" || m["bootstrap_room"].(json.Number).String() != strconv.Itoa(room) {
			t.Errorf("prefill reply lacks the bootstrap fields: %s", pBody)
		}
	}
	// A decode whose room never gets a prefill fails.
	pw.joinWait = 50 * time.Millisecond
	status, _, b := post(t, dec.URL+"/v1/chat/completions", body(99, true), "EPP-Profile: decode")
	if status != 400 || !strings.Contains(errorMessage(t, b), "bootstrap failed") {
		t.Errorf("lonely decode: %d %s", status, b)
	}
	// A room must be an integer.
	status, _, b = post(t, dec.URL+"/v1/chat/completions", strings.Replace(body(1, true), `"bootstrap_room":1`, `"bootstrap_room":"1"`, 1))
	if status != 400 || !strings.Contains(errorMessage(t, b), "bootstrap_room") {
		t.Errorf("string room: %d %s", status, b)
	}
	// A prefill nobody joins gives up after BootstrapWait.
	_, short := startWorker(t, Config{Roles: []Role{RolePrefill}, BootstrapWait: 50 * time.Millisecond})
	status, _, b = post(t, short.URL+"/v1/chat/completions", body(5, false), "EPP-Profile: prefill")
	if status != 500 || !strings.Contains(errorMessage(t, b), "did not join") {
		t.Errorf("lonely prefill: %d %s", status, b)
	}
	// Sequential shape: an early-answering prefill, then decode joins.
	_, early := startWorker(t, Config{Roles: []Role{RolePrefill}})
	seq := strings.Replace(body(6, false), strconv.Itoa(port(t, pre.URL)), strconv.Itoa(port(t, early.URL)), 1)
	if status, _, b := post(t, early.URL+"/v1/chat/completions", seq, "EPP-Profile: prefill"); status != 200 {
		t.Fatalf("early prefill: %d %s", status, b)
	}
	seqDecode := strings.Replace(seq, `"bootstrap_room":6`, `"bootstrap_room":6,"bootstrap_host":"127.0.0.1"`, 1)
	if status, _, b := post(t, dec.URL+"/v1/chat/completions", seqDecode, "EPP-Profile: decode"); status != 200 {
		t.Errorf("sequential decode: %d %s", status, b)
	}
}

// Encode answers one ec-nixl descriptor per hash; prefill fetches each from
// the named peer and rejects unknown ones.
func TestECHandoff(t *testing.T) {
	_, enc := startWorker(t, Config{Name: "e1", Roles: []Role{RoleEncode}})
	_, pre := startWorker(t, Config{Roles: []Role{RolePrefill}})
	img := dataURI(make([]byte, 4096))
	part := `{"type":"image_url","image_url":{"url":"` + img + `"}}`
	h := MediaHash(make([]byte, 4096))
	encBody := `{"model":"m","messages":[{"role":"user","content":[` + part + `]}],"tokens":{"token_ids":[1,9000,9000,9000,9000,9000,9000,9000,9000],` +
		`"features":{"mm_hashes":{"image":["` + h + `"]},"mm_placeholders":{"image":[{"offset":1,"length":8}]}}},"max_tokens":1,"stream":false}`
	status, _, b := post(t, enc.URL+"/v1/chat/completions", encBody, "EPP-Profile: encode")
	if status != 200 {
		t.Fatalf("encode: %d %s", status, b)
	}
	var r struct {
		EC map[string]ecDescriptor `json:"ec_transfer_params"`
	}
	json.Unmarshal(b, &r)
	d, ok := r.EC[h]
	if !ok || len(r.EC) != 1 || d.PeerHost != "127.0.0.1" || d.PeerPort != port(t, enc.URL) || d.SizeBytes != 8*8192 || d.NixlAgentMetadataB64 == "" {
		t.Fatalf("ec_transfer_params: %s", b)
	}
	ec, _ := json.Marshal(r.EC)
	prefill := func(ec string) string {
		return `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what"},` + part + `]}],"max_tokens":1,` +
			`"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false},"ec_transfer_params":` + ec + `}`
	}
	if status, _, b := post(t, pre.URL+"/v1/chat/completions", prefill(string(ec)), "EPP-Profile: prefill"); status != 200 {
		t.Errorf("prefill with EC: %d %s", status, b)
	}
	for name, ec := range map[string]string{
		"hash not in prompt": `{"feed":{"peer_host":"127.0.0.1","peer_port":` + strconv.Itoa(d.PeerPort) + `,"size_bytes":1}}`,
		"peer lacks it":      strings.Replace(string(ec), strconv.Itoa(d.PeerPort), strconv.Itoa(port(t, pre.URL)), 1),
	} {
		status, _, b := post(t, pre.URL+"/v1/chat/completions", prefill(ec), "EPP-Profile: prefill")
		if status != 400 || !strings.Contains(errorMessage(t, b), "EC transfer failed") {
			t.Errorf("%s: %d %s", name, status, b)
		}
	}
}

// A chat with pre-rendered tokens must carry one media part per item, and a
// part's uuid must be its item's hash (PROTOCOL.md section 8).
func TestTokensMatchParts(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}})
	part := func(uuid string) string {
		s := `{"type":"image_url","image_url":{"url":"` + dataURI([]byte("x")) + `"}`
		if uuid != "" {
			s += `,"uuid":"` + uuid + `"`
		}
		return s + "}"
	}
	body := func(parts string) string {
		return `{"messages":[{"role":"user","content":[` + parts + `]}],"tokens":{"token_ids":[1,9000,9000],` +
			`"features":{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]}}}}`
	}
	for _, tc := range []struct {
		parts  string
		status int
	}{
		{part("h0"), 200}, {part(""), 200}, {part("h1"), 400}, {part("h0") + "," + part("h0"), 400}, {`{"type":"text","text":"x"}`, 400},
	} {
		if status, _, b := post(t, srv.URL+"/v1/chat/completions", body(tc.parts)); status != tc.status {
			t.Errorf("%s: %d, want %d: %s", tc.parts, status, tc.status, b)
		}
	}
}

// The encoder keys its descriptor as vLLM keys its cache: by the part's
// uuid when present (celflow sends the item's hash there, issue 10), else
// by the media's hash.
func TestEncodeKeysByUUID(t *testing.T) {
	_, enc := startWorker(t, Config{Name: "e1", Roles: []Role{RoleEncode}})
	img := dataURI(make([]byte, 4096))
	for _, tc := range []struct{ uuid, fault, want string }{
		{`,"uuid":"img_1_b2"`, "", "img_1_b2"},
		{``, "", MediaHash(make([]byte, 4096))},
		{`,"uuid":"img_1_b2"`, "ec-key=img_0_a1", "img_0_a1"}, // the faulty encoder of issue 10
	} {
		body := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + img + `"}` + tc.uuid + `}]}],"max_tokens":1}`
		hdr := FaultHeader + ": " + tc.fault
		status, _, b := post(t, enc.URL+"/v1/chat/completions", body, "EPP-Profile: encode", hdr)
		var r struct {
			EC map[string]json.RawMessage `json:"ec_transfer_params"`
		}
		if status != 200 || json.Unmarshal(b, &r) != nil || len(r.EC) != 1 || r.EC[tc.want] == nil {
			t.Errorf("uuid %q: %d %s, want one descriptor keyed %s", tc.uuid, status, b, tc.want)
		}
	}
}
