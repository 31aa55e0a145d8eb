package replay

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// budget is a token count as encoding/json reads it and vLLM takes it: a
// number with an integral value; ok is false for anything else.
func budget(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytesReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("not a JSON object (%v): %s", err, b)
	}
	return m
}

// FuzzContinuation: for any client body the front accepts (a JSON object
// without repeated names) on each route, Check, ClientAsked, IncludeUsage
// and Continuation never panic, the flags are encoding/json's reading of
// return_token_ids and stream_options.include_usage, and a continuation
// is a JSON object without repeated names that carries the prompt and
// generated ids, streams with return_token_ids, keeps to the budget
// encoding/json reads (max_completion_tokens or max_tokens; generate's
// sampling_params.max_tokens; vLLM's 16 when none; none at all when the
// budget is not a count or is spent), lowers min_tokens alike, drops what
// the completions route has no use for and leaves every other member as
// it was.
func FuzzContinuation(f *testing.F) {
	f.Add(uint8(0), []byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":10,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`), uint8(2), []byte{7, 8})
	f.Add(uint8(1), []byte(`{"prompt":"a b","max_tokens":4.0,"min_tokens":1e1,"seed":12345678901234567890,"echo":false,"return_token_ids":true}`), uint8(1), []byte{})
	f.Add(uint8(2), []byte(`{"token_ids":[1],"sampling_params":{"max_tokens":"6","min_tokens":3}}`), uint8(2), []byte{9})
	f.Add(uint8(2), []byte(`{"token_ids":[1],"sampling_params":{"max_tokens":6.5}}`), uint8(2), []byte{9})
	f.Add(uint8(0), []byte(`{"messages":[],"max_tokens":100,"max_completion_tokens":null,"tools":[],"n":1}`), uint8(40), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, r uint8, body []byte, generated uint8, gen []byte) {
		route := []engine.Route{engine.RouteChat, engine.RouteCompletions, engine.RouteGenerate}[int(r)%3]
		obj, err := jsonb.Parse(body)
		if err != nil {
			return // the front refuses it
		}
		in := decodeObject(t, body)
		_ = Check(route, obj, 0)
		if got, want := ClientAsked(obj), in["return_token_ids"] == true; got != want {
			t.Fatalf("ClientAsked %v, encoding/json %v", got, want)
		}
		so, _ := in["stream_options"].(map[string]any)
		if got, want := IncludeUsage(obj), so != nil && so["include_usage"] == true; got != want {
			t.Fatalf("IncludeUsage %v, encoding/json %v", got, want)
		}
		ids := []int64{1, 2}
		for _, b := range gen {
			ids = append(ids, int64(b))
		}
		g := int64(generated % 64)
		out, left := Continuation(route, append([]byte(nil), body...), obj, ids, int(g), nil)

		// What encoding/json says the continuation must be.
		src := in
		if route == engine.RouteGenerate {
			sp, isObj := in["sampling_params"].(map[string]any)
			if in["sampling_params"] != nil && !isObj {
				if left {
					t.Fatalf("sampling_params %v is not an object, yet a continuation: %s", in["sampling_params"], out)
				}
				return
			}
			src = sp
		}
		var raw any
		if route == engine.RouteChat {
			raw = in["max_completion_tokens"]
		}
		if raw == nil {
			raw = src["max_tokens"]
		}
		wantMax, limited := int64(16), true
		switch {
		case raw == nil && route == engine.RouteChat:
			limited = false
		case raw != nil:
			m, ok := budget(raw)
			if !ok {
				if left {
					t.Fatalf("budget %v is not a count, yet a continuation: %s", raw, out)
				}
				return
			}
			wantMax = m
		}
		if limited && wantMax-g < 1 {
			if left {
				t.Fatalf("budget %d spent by %d, yet a continuation: %s", wantMax, g, out)
			}
			return
		}
		if !left {
			t.Fatalf("budget %v (%d) with %d generated: no continuation", raw, wantMax, g)
		}
		if _, err := jsonb.Parse(out); err != nil {
			t.Fatalf("continuation %s: %v", out, err)
		}
		o := decodeObject(t, out)
		dst := o
		if route == engine.RouteGenerate {
			dst, _ = o["sampling_params"].(map[string]any)
		}
		idsKey := "prompt"
		if route == engine.RouteGenerate {
			idsKey = "token_ids"
		}
		var got []int64
		for _, v := range o[idsKey].([]any) {
			n, _ := v.(json.Number).Int64()
			got = append(got, n)
		}
		if !slices.Equal(got, ids) {
			t.Fatalf("%s %v, want %v", idsKey, got, ids)
		}
		if limited {
			if m, ok := budget(dst["max_tokens"]); !ok || m != wantMax-g {
				t.Fatalf("max_tokens %v, want %d", dst["max_tokens"], wantMax-g)
			}
		} else if v, ok := dst["max_tokens"]; !ok || v != nil {
			t.Fatalf("max_tokens %v, want null", v)
		}
		if mt, ok := budget(src["min_tokens"]); ok {
			if m, _ := budget(dst["min_tokens"]); m != max(mt-g, 0) {
				t.Fatalf("min_tokens %v, want %d", dst["min_tokens"], max(mt-g, 0))
			}
		}
		changed := map[string]bool{idsKey: true, "max_tokens": true, "min_tokens": true, "stream": true, "return_token_ids": true, "sampling_params": true}
		if route != engine.RouteGenerate {
			if o["stream"] != true || o["return_token_ids"] != true {
				t.Fatalf("stream %v return_token_ids %v", o["stream"], o["return_token_ids"])
			}
		}
		dropped := map[string]bool{}
		switch route {
		case engine.RouteChat:
			for _, k := range chatOnly {
				dropped[k] = true
			}
		case engine.RouteCompletions:
			dropped["echo"], dropped["suffix"] = true, true
		}
		for k, v := range in {
			if dropped[k] {
				if _, ok := o[k]; ok {
					t.Fatalf("%s kept in a completions continuation", k)
				}
				continue
			}
			if !changed[k] && !reflect.DeepEqual(o[k], v) {
				t.Fatalf("%s: %v, was %v", k, o[k], v)
			}
		}
	})
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
