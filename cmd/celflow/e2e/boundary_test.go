//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The trust boundary (docs/threat-model.md, issue 10), tried as an attacker
// would against real celflow-sim workers in direct and gateway mode, on
// chat, completions and generate: no worker ever receives a transfer host,
// bootstrap field, header naming a phase or an endpoint, or cache key that
// the client chose.
func TestBoundary(t *testing.T) {
	for _, gw := range []bool{false, true} {
		t.Run(modeName(gw), func(t *testing.T) {
			t.Parallel()
			st := startStack(t, stackOpts{gateway: gw})
			t.Run("celflow-owned body fields are refused before any leg", func(t *testing.T) { reservedFields(t, st) })
			t.Run("owned headers reach no leg", func(t *testing.T) { ownedHeaders(t, st) })
			t.Run("a client part uuid reaches no leg", func(t *testing.T) { partUUID(t, st) })
		})
	}
}

// evilHost is what the attacker names; no leg may carry it.
const evilHost = "10.66.66.66"

// routeBody is a valid request body per route, the attack merged in.
func routeBody(route, tag string, attack map[string]any) map[string]any {
	var b map[string]any
	switch route {
	case "chat":
		b = map[string]any{"model": model, "max_tokens": 4,
			"messages": []any{map[string]any{"role": "user", "content": prompt(tag)}}}
	case "completions":
		b = map[string]any{"model": model, "max_tokens": 4, "prompt": prompt(tag)}
	case "generate":
		toks := []int{1}
		for i := range 19 {
			toks = append(toks, 300+i*11+len(tag))
		}
		b = map[string]any{"model": model, "token_ids": toks, "sampling_params": map[string]any{"max_tokens": 2}}
	}
	for k, v := range attack {
		if k == "sampling_params" {
			sp, _ := b["sampling_params"].(map[string]any)
			if sp == nil {
				sp = map[string]any{}
			}
			for sk, sv := range v.(map[string]any) {
				sp[sk] = sv
			}
			v = sp
		}
		b[k] = v
	}
	return b
}

var routePaths = map[string]string{"chat": "/v1/chat/completions", "completions": "/v1/completions", "generate": "/inference/v1/generate"}

// ISSUE 10: "Client transfer params reach workers". Before the fix the
// conditional-decode leg (and decode, with no prefill) forwarded them.
func reservedFields(t *testing.T, st *stack) {
	mode := modeName(st.gateway != nil)
	kv := map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "evil",
		"remote_block_ids": []any{[]any{1, 2}}, "remote_host": evilHost, "remote_port": 6666}
	ec := map[string]any{"h0": map[string]any{"peer_host": evilHost, "peer_port": 6666}}
	attacks := []struct {
		name   string
		attack map[string]any
		param  string
	}{
		{"kv top level", map[string]any{"kv_transfer_params": kv}, "kv_transfer_params"},
		{"kv in extra_args", map[string]any{"sampling_params": map[string]any{"extra_args": map[string]any{"kv_transfer_params": kv}}},
			"sampling_params.extra_args.kv_transfer_params"},
		{"ec top level", map[string]any{"ec_transfer_params": ec}, "ec_transfer_params"},
		{"ec in extra_args", map[string]any{"sampling_params": map[string]any{"extra_args": map[string]any{"ec_transfer_params": ec}}},
			"sampling_params.extra_args.ec_transfer_params"},
		{"kv in vllm_xargs", map[string]any{"vllm_xargs": map[string]any{"kv_transfer_params": evilHost}}, "vllm_xargs.kv_transfer_params"},
		{"sglang bootstrap host", map[string]any{"bootstrap_host": evilHost}, "bootstrap_host"},
		{"sglang bootstrap port", map[string]any{"bootstrap_port": 6666}, "bootstrap_port"},
		{"sglang bootstrap room", map[string]any{"bootstrap_room": 42}, "bootstrap_room"},
	}
	for _, route := range []string{"chat", "completions", "generate"} {
		for _, a := range attacks {
			id := idSafe("e2e-reserved-" + mode + "-" + route + "-" + a.name)
			status, body := postJSON(t, st.url+routePaths[route], id, routeBody(route, id, a.attack))
			expectRefused(t, st, id, status, body, a.param, "reserved_field")
		}
		// The duplicate-key variant: a harmless first member and the
		// attack second (vLLM reads the last). Refused either as a reserved
		// field or, with the duplicate check, as duplicate_key.
		id := idSafe("e2e-reserved-dup-" + mode + "-" + route)
		raw, _ := json.Marshal(routeBody(route, id, nil))
		raw = append(raw[:len(raw)-1], []byte(`,"kv_transfer_params":null,"kv_transfer_params":{"remote_host":"`+evilHost+`","remote_port":6666}}`)...)
		status, body := postRaw(t, st.url+routePaths[route], id, raw, nil)
		expectRefused(t, st, id, status, body, "kv_transfer_params", "reserved_field", "duplicate_key")
	}
}

// expectRefused: a 400 OpenAI error with one of codes naming param, and no
// worker received anything for the request.
func expectRefused(t *testing.T, st *stack, id string, status int, body []byte, param string, codes ...string) {
	t.Helper()
	var e struct {
		Error struct {
			Message, Type, Code string
			Param               *string
		}
	}
	if err := json.Unmarshal(body, &e); err != nil || status != http.StatusBadRequest {
		t.Errorf("%s: HTTP %d %s, want 400", id, status, body)
	}
	ok := false
	for _, c := range codes {
		ok = ok || e.Error.Code == c
	}
	if !ok || e.Error.Type != "invalid_request_error" || e.Error.Param == nil || *e.Error.Param != param ||
		!strings.HasSuffix(e.Error.Message, "(request_id: "+id+")") {
		t.Errorf("%s: error %s, want code %v param %q", id, body, codes, param)
	}
	if legs := st.legs(id); len(legs) != 0 {
		t.Errorf("%s: workers received legs of a refused request:\n%s", id, describe(legs))
	}
}

// ownedHeaders: headers naming a phase or an endpoint never reach render,
// conditional decode, encode, prefill or decode, on any route.
func ownedHeaders(t *testing.T, st *stack) {
	mode := modeName(st.gateway != nil)
	const val = "client-owned-" + evilHost
	hdr := http.Header{}
	for _, h := range []string{"EPP-Profile", "Prefer", "x-gateway-destination-endpoint", "x-gateway-destination-endpoint-subset",
		"x-gateway-destination-endpoint-served", "x-prefiller-host-port", "x-encoder-hosts-ports",
		"x-llm-d-inference-objective", "x-llm-d-inference-fairness-id"} {
		hdr.Set(h, val)
	}
	// EPP-Profile and Prefer with values a worker or picker would obey.
	hdr.Set("EPP-Profile", "prefill")
	hdr.Set("Prefer", "if-available")
	image := map[string]any{"type": "image_url", "image_url": map[string]any{"url": st.media.URL + "/gradient/16x16.png"}}
	seen := map[string]bool{}
	for _, c := range []struct {
		route string
		body  map[string]any
	}{
		{"chat", map[string]any{"model": model, "max_tokens": 4, "messages": []any{map[string]any{"role": "user",
			"content": []any{map[string]any{"type": "text", "text": prompt("owned headers " + mode)}, image}}}}},
		{"completions", routeBody("completions", "owned completions "+mode, nil)},
		{"generate", routeBody("generate", "owned generate "+mode, nil)},
	} {
		// Twice: the repeat is a conditional-decode hit, so that leg is
		// checked too.
		for _, kind := range []string{"miss", "hit"} {
			id := idSafe("e2e-owned-" + mode + "-" + c.route + "-" + kind)
			b, _ := json.Marshal(c.body)
			status, body := postRaw(t, st.url+routePaths[c.route], id, b, hdr)
			if status != http.StatusOK {
				t.Fatalf("%s: HTTP %d %s", id, status, body)
			}
			legs := st.legs(id)
			if len(legs) == 0 {
				t.Fatalf("%s: no legs recorded", id)
			}
			for _, l := range legs {
				what := l.Worker
				if l.Headers.Get("Prefer") != "" {
					what = "conditional-decode"
				}
				seen[what] = true
				for name, vs := range l.Headers {
					for _, v := range vs {
						if strings.Contains(v, evilHost) {
							t.Errorf("%s: %s leg carries the client's %s: %q", id, what, name, v)
						}
					}
				}
				if p := l.Headers.Get("Epp-Profile"); l.Worker != "render" && p != l.Worker {
					t.Errorf("%s: %s leg has EPP-Profile %q", id, what, p)
				}
				// The client's Prefer must not make the final decode (the
				// one carrying prefill's KV handoff) conditional, nor reach
				// another role; celflow's own goes on conditional decode.
				_, kvTop := get(l.body, "kv_transfer_params")
				_, kvGen := get(l.body, "sampling_params.extra_args.kv_transfer_params")
				if p := l.Headers.Get("Prefer"); p != "" && (l.Worker != "decode" || kvTop || kvGen) {
					t.Errorf("%s: %s leg has Prefer %q", id, what, p)
				}
			}
		}
	}
	for _, w := range []string{"render", "encode", "prefill", "decode", "conditional-decode"} {
		if !seen[w] {
			t.Errorf("no %s leg was checked", w)
		}
	}
}

// partUUID: vLLM keys an item's caches by a part's uuid; the client's is
// stripped at the front, so no leg carries it (decode gets the hash).
func partUUID(t *testing.T, st *stack) {
	mode := modeName(st.gateway != nil)
	const victim = "victim-item-hash-e2e"
	id := idSafe("e2e-part-uuid-" + mode)
	body := map[string]any{"model": model, "max_tokens": 4, "messages": []any{map[string]any{"role": "user",
		"content": []any{map[string]any{"type": "text", "text": prompt("part uuid " + mode)},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": st.media.URL + "/gradient/24x24.png"}, "uuid": victim}}}}}
	status, out := postJSON(t, st.url+routePaths["chat"], id, body)
	if status != http.StatusOK {
		t.Fatalf("HTTP %d %s", status, out)
	}
	legs := st.legs(id)
	if len(of(legs, "render")) != 1 || len(of(legs, "decode")) == 0 {
		t.Fatalf("unexpected legs:\n%s", describe(legs))
	}
	for _, l := range legs {
		if strings.Contains(l.Body, victim) {
			t.Errorf("%s leg carries the client's uuid: %.300s", l.Worker, l.Body)
		}
	}
}

// postRaw posts raw bytes with the suite's client headers plus hdr.
func postRaw(t *testing.T, url, id string, body []byte, hdr http.Header) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	req.Header.Set("Authorization", "Bearer e2e-key")
	req.Header.Set("Cookie", "session=e2e")
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out
}

// The front's limits against the real binary, over raw sockets: the
// smuggling shape, 9,000 headers, and an over-cap body sent by a client that
// writes it all before reading (ISSUE 10: "Front limits below what a proxy
// enforces"). Before the fix the first two were served and the 413 was lost
// to a reset about half the time.
func TestFrontLimits(t *testing.T) {
	t.Parallel()
	st := startStack(t, stackOpts{server: map[string]string{"max_request_body_size": "1"}})
	addr := strings.TrimPrefix(st.url, "http://")
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: celflow\r\nX-Request-Id: %s\r\n"
	body := `{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`

	t.Run("CL and TE", func(t *testing.T) {
		id := "e2e-front-cl-te"
		smuggled := "POST /v1/completions HTTP/1.1\r\nHost: celflow\r\nX-Request-Id: e2e-front-smuggled\r\nContent-Length: 2\r\n\r\n{}"
		req := fmt.Sprintf(head, id) + fmt.Sprintf("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body) + smuggled
		status, hdr, closed := rawExchange(t, addr, req)
		if status != 400 || hdr.Get("X-Request-Id") != id || !closed {
			t.Errorf("status %d id %q closed %v", status, hdr.Get("X-Request-Id"), closed)
		}
		for _, rid := range []string{id, "e2e-front-smuggled"} {
			if legs := st.legs(rid); len(legs) != 0 {
				t.Errorf("%s reached workers:\n%s", rid, describe(legs))
			}
		}
	})
	t.Run("9000 headers", func(t *testing.T) {
		var b strings.Builder
		for i := range 9000 {
			fmt.Fprintf(&b, "X-H%d: v\r\n", i)
		}
		id := "e2e-front-headers"
		req := fmt.Sprintf(head, id) + b.String() + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
		status, hdr, closed := rawExchange(t, addr, req)
		if status != 431 || hdr.Get("X-Request-Id") != id || !closed {
			t.Errorf("status %d id %q closed %v", status, hdr.Get("X-Request-Id"), closed)
		}
		if legs := st.legs(id); len(legs) != 0 {
			t.Errorf("legs:\n%s", describe(legs))
		}
	})
	t.Run("413 with Connection: close, send then read", func(t *testing.T) {
		big := strings.Repeat("a", 6<<20)
		for i := range 10 {
			id := fmt.Sprintf("e2e-front-413-%d", i)
			req := fmt.Sprintf(head, id) + fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(big)) + big
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := c.Write([]byte(req)); err != nil {
				c.Close()
				t.Fatalf("round %d: the write failed (reset before the reply): %v", i, err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				c.Close()
				t.Fatalf("round %d: no reply: %v", i, err)
			}
			resp.Body.Close()
			c.Close()
			if resp.StatusCode != 413 || resp.Header.Get("X-Request-Id") != id {
				t.Fatalf("round %d: %d", i, resp.StatusCode)
			}
		}
	})
}

// rawExchange writes req on a fresh connection (concurrently with reading)
// and returns the reply's status and headers, and whether the server then
// closed the connection.
func rawExchange(t *testing.T, addr, req string) (int, http.Header, bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = c.Write([]byte(req)) }()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, err = br.ReadByte()
	return resp.StatusCode, resp.Header, err != nil
}
