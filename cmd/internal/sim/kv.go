package sim

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// kvEntry is the "KV" a prefill produced: enough to check that decode pulls
// the KV of the same prompt.
type kvEntry struct {
	RemoteRequestID string `json:"remote_request_id,omitempty"`
	PromptKey       string `json:"prompt_key"`
	NumTokens       int    `json:"num_tokens"`
	Worker          string `json:"worker"`
}

// nixlParams is the kv_transfer_params a vLLM NIXL prefill answers with.
type nixlParams struct {
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	RemoteBlockIDs  [][]int `json:"remote_block_ids"`
	RemoteEngineID  string  `json:"remote_engine_id"`
	RemoteRequestID string  `json:"remote_request_id"`
	RemoteHost      string  `json:"remote_host"`
	RemotePort      int     `json:"remote_port"`
	TPSize          int     `json:"tp_size"`
	RemoteNumTokens int     `json:"remote_num_tokens"`
}

// ecDescriptor is one entry of an encoder's ec_transfer_params.
type ecDescriptor struct {
	PeerHost             string `json:"peer_host"`
	PeerPort             int    `json:"peer_port"`
	SizeBytes            int    `json:"size_bytes"`
	NixlAgentMetadataB64 string `json:"nixl_agent_metadata_b64"`
}

// handoffError is a failed KV/EC/bootstrap check: the request gets 400 (or
// Status when set) with the message.
type handoffError struct {
	Status int
	Msg    string
}

func (e *handoffError) Error() string { return e.Msg }

func handoffErr(format string, a ...any) error {
	return &handoffError{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, a...)}
}

// kvFlag reports whether kv[key] is the JSON literal true.
func kvFlag(kv map[string]json.RawMessage, key string) bool {
	return strings.TrimSpace(string(kv[key])) == "true"
}

// isNixlRequest: a kv-nixl prefill names the remote_* keys (as nulls); a
// kv-shared-storage one carries only the two flags.
func isNixlRequest(kv map[string]json.RawMessage) bool {
	for k := range kv {
		if strings.HasPrefix(k, "remote_") {
			return true
		}
	}
	return false
}

// produceKV plays a prefill asked to keep its KV for a remote decode.
func (w *Worker) produceKV(c *call, p promptInfo) (any, error) {
	e := kvEntry{PromptKey: p.Key(), NumTokens: len(p.Tokens), Worker: w.cfg.Name}
	if !isNixlRequest(c.req.KV) {
		return nil, w.writeShared(e)
	}
	host, port := w.self(c.r)
	e.RemoteRequestID = "rr-" + randHex(8)
	if !c.fault.KVDrop { // kv-drop: the answer names KV this worker no longer has
		w.kv.put(e.RemoteRequestID, e)
	}
	nblocks := (len(p.Tokens) + prefixBlock - 1) / prefixBlock
	first := int(seedOf(p.Tokens) % 10000)
	blocks := make([]int, nblocks)
	for i := range blocks {
		blocks[i] = first + i
	}
	return nixlParams{
		DoRemotePrefill: true, RemoteBlockIDs: [][]int{blocks},
		RemoteEngineID: "sim-" + w.cfg.Name, RemoteRequestID: e.RemoteRequestID,
		RemoteHost: host, RemotePort: port, TPSize: 1, RemoteNumTokens: len(p.Tokens),
	}, nil
}

// writeShared stores the KV file of a kv-shared-storage prefill.
func (w *Worker) writeShared(e kvEntry) error {
	if err := os.MkdirAll(w.cfg.SharedDir, 0o755); err != nil {
		return &handoffError{Status: http.StatusInternalServerError, Msg: "shared storage: " + err.Error()}
	}
	b, _ := json.Marshal(e)
	tmp, err := os.CreateTemp(w.cfg.SharedDir, ".kv-*")
	if err == nil {
		_, err = tmp.Write(b)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), w.sharedPath(e.PromptKey))
		}
	}
	if err != nil {
		os.Remove(tmp.Name())
		return &handoffError{Status: http.StatusInternalServerError, Msg: "shared storage: " + err.Error()}
	}
	return nil
}

func (w *Worker) sharedPath(key string) string { return filepath.Join(w.cfg.SharedDir, key+".kv") }

// pullKV plays a decode told that its KV was prefilled elsewhere.
func (w *Worker) pullKV(c *call, p promptInfo) error {
	kv := c.req.KV
	if !isSet(kv["remote_host"]) && !isSet(kv["remote_port"]) && !isSet(kv["remote_request_id"]) {
		if _, err := os.Stat(w.sharedPath(p.Key())); err != nil {
			return handoffErr("KV transfer failed: no KV for this prompt in shared storage %s (was it prefilled?)", w.cfg.SharedDir)
		}
		return nil
	}
	var host, id string
	_ = json.Unmarshal(kv["remote_host"], &host)
	_ = json.Unmarshal(kv["remote_request_id"], &id)
	port := jsonPort(kv["remote_port"])
	if host == "" || port == 0 || id == "" {
		return handoffErr("KV transfer failed: kv_transfer_params needs remote_host, remote_port and remote_request_id")
	}
	target := "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/sim/kv/" + url.PathEscape(id)
	var e kvEntry
	if err := getJSON(c.r.Context(), target, &e); err != nil {
		return handoffErr("KV transfer failed: remote_request_id %s from %s: %v", id, net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	if e.PromptKey != p.Key() {
		return handoffErr("KV transfer failed: remote_request_id %s holds the KV of another prompt (%d tokens, decode has %d)", id, e.NumTokens, len(p.Tokens))
	}
	return nil
}

// checkEC plays a prefill given encoder outputs: every descriptor that names
// a peer must be for an item of the prompt and fetchable from that peer.
func (w *Worker) checkEC(c *call, p promptInfo) error {
	hashes := map[string]bool{}
	for _, it := range p.Items {
		hashes[it.Hash] = true
	}
	for h, raw := range c.req.EC {
		var d ecDescriptor
		if json.Unmarshal(raw, &d) != nil || d.PeerHost == "" || d.PeerPort == 0 {
			continue // non-object or peer-less descriptors pass through
		}
		if !hashes[h] {
			return handoffErr("EC transfer failed: ec_transfer_params names %s, which is not an item of the prompt", h)
		}
		peer := net.JoinHostPort(d.PeerHost, strconv.Itoa(d.PeerPort))
		var got map[string]any
		if err := getJSON(c.r.Context(), "http://"+peer+"/sim/ec/"+url.PathEscape(h), &got); err != nil {
			return handoffErr("EC transfer failed: %s from %s: %v", h, peer, err)
		}
	}
	return nil
}

// encodeItems plays an encoder: it keeps each item's "embedding" and answers
// one ec-nixl descriptor per item, keyed as vLLM keys its multimodal cache:
// by the part's uuid when the chat part carries one (celflow sends the
// item's hash there, issue 10), else by the item's hash.
func (w *Worker) encodeItems(c *call, p promptInfo) any {
	if len(p.Items) == 0 {
		return nil
	}
	host, port := w.self(c.r)
	out := map[string]ecDescriptor{}
	uuids := partUUIDs(c.req.Media)
	seen := map[string]int{}
	for _, it := range p.Items {
		key := it.Hash
		if u := uuids[it.Modality]; seen[it.Modality] < len(u) && u[seen[it.Modality]] != "" {
			key = u[seen[it.Modality]]
		}
		seen[it.Modality]++
		if c.fault.ECKey != "" { // a faulty encoder: the descriptor names another item
			key = c.fault.ECKey
		}
		size := it.Length * 8192
		w.ec.put(key, size)
		out[key] = ecDescriptor{
			PeerHost: host, PeerPort: port, SizeBytes: size,
			NixlAgentMetadataB64: base64.StdEncoding.EncodeToString([]byte("sim-agent:" + w.cfg.Name)),
		}
	}
	return out
}

// partUUIDs lists the chat parts' uuids per modality, in order ("" where a
// part has none); nil for other formats.
func partUUIDs(media []mediaPart) map[string][]string {
	if len(media) == 0 {
		return nil
	}
	out := map[string][]string{}
	for _, mp := range media {
		out[mp.Modality] = append(out[mp.Modality], mp.UUID)
	}
	return out
}

// serveKV answers GET /sim/kv/{id}: 200 with the entry while the lease holds.
func (w *Worker) serveKV(rw http.ResponseWriter, r *http.Request) {
	e, ok := w.kv.get(r.PathValue("id"))
	if !ok {
		writeError(rw, http.StatusNotFound, "no KV for remote_request_id "+r.PathValue("id"))
		return
	}
	writeJSON(rw, http.StatusOK, e)
}

// serveEC answers GET /sim/ec/{hash}.
func (w *Worker) serveEC(rw http.ResponseWriter, r *http.Request) {
	h := r.PathValue("hash")
	size, ok := w.ec.get(h)
	if !ok {
		writeError(rw, http.StatusNotFound, "no encoder output for "+h)
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"mm_hash": h, "size_bytes": size})
}

// self is the host and port peers reach this worker on: --advertise, else
// the local address the request arrived at.
func (w *Worker) self(r *http.Request) (string, int) {
	hp := w.cfg.Advertise
	if hp == "" {
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			hp = a.String()
		}
	}
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return "127.0.0.1", 0
	}
	port, _ := strconv.Atoi(ps)
	return host, port
}

func jsonPort(raw json.RawMessage) int {
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return n
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		n, _ = strconv.Atoi(s)
	}
	return n
}

// getJSON GETs target and decodes a 200 reply into v.
func getJSON(ctx context.Context, target string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	return doJSON(req, v)
}

func doJSON(req *http.Request, v any) error {
	resp, err := controlClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
