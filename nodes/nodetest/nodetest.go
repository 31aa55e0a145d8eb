// Package nodetest registers stand-in node types for engine, CLI and
// golden tests, so they never depend on the real node types being written
// elsewhere. Names start with "t-"; contracts mimic the shipped E/P/D nodes:
//
//	t-fetch        provides media (from the chat body's media parts)
//	t-render       provides tokens and features; params.address required
//	t-cond-decode  responds, not terminal: answers on 2xx, else fails with that status (default 412)
//	t-encode       fan-out per item, needs media, provides ec; a Merger
//	t-prefill      provides kv; needs tokens on chat when tokens-in is on
//	t-decode       responds, terminal: answers 200
//	t-noop         does nothing (params.outputs become its outputs)
//	t-fail         fails with params.kind / params.status
//	t-panic        panics
//	t-survivor     SurvivesEnd: keeps running after the run ends
//
// Every type takes `delay` (a duration: sleeps, honouring the context) and
// logs "start <id>" / "end <id>" events to the run (see Events).
package nodetest

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/celflow/celflow/engine"
)

var once sync.Once

// Register adds the t-* types to the engine registry (idempotent).
func Register() { once.Do(register) }

const common = `"delay": {"$ref": "https://celflow.dev/schema/defs.json#/$defs/duration"}`

func schemaOf(props string) []byte {
	if props != "" {
		props = ", " + props
	}
	return []byte(`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "additionalProperties": false,
"properties": {` + common + props + `}}`)
}

type params struct {
	Delay    string         `json:"delay"`
	Address  string         `json:"address"`
	Status   int            `json:"status"`
	Kind     string         `json:"kind"`
	TokensIn *bool          `json:"tokens_in"`
	Outputs  map[string]any `json:"outputs"`
	MaxTotal int            `json:"max_total_tokens"`
}

func register() {
	reg := func(name, doc, props string, fan bool, mk func(p params, b *engine.BuildContext) (*node, error)) {
		engine.Register(engine.NodeType{Name: name, Doc: doc, Schema: schemaOf(props), FanOut: fan,
			Build: func(b *engine.BuildContext, raw json.RawMessage) (engine.Node, error) {
				var p params
				if err := json.Unmarshal(raw, &p); err != nil {
					return nil, &engine.ParamError{Msg: err.Error()}
				}
				n, err := mk(p, b)
				if err != nil {
					return nil, err
				}
				n.delay, _ = time.ParseDuration(p.Delay)
				n.p = p
				return n, nil
			}})
	}
	reg("t-fetch", "test: provides media", "", false, func(p params, _ *engine.BuildContext) (*node, error) {
		return &node{kind: "fetch", c: engine.Contract{Provides: []engine.AnyKey{engine.KeyMedia}}}, nil
	})
	reg("t-render", "test: provides tokens and features", `"address": {"type": "string", "minLength": 1}, "max_total_tokens": {"type": "integer", "minimum": 0}`, false,
		func(p params, _ *engine.BuildContext) (*node, error) {
			if p.Address == "" {
				return nil, &engine.ParamError{Path: "", Msg: "address is required"}
			}
			return &node{kind: "render", c: engine.Contract{Provides: []engine.AnyKey{engine.KeyTokens, engine.KeyFeatures}, Role: "render"}}, nil
		})
	reg("t-cond-decode", "test: answers on 2xx, else fails with status", `"status": {"type": "integer", "minimum": 100, "maximum": 599}`, false,
		func(p params, _ *engine.BuildContext) (*node, error) {
			return &node{kind: "respond", c: engine.Contract{Responds: true, Role: "decode", Statuses: []int{412}}}, nil
		})
	reg("t-encode", "test: fan-out, needs media, provides ec", `"status": {"type": "integer"}`, true,
		func(p params, _ *engine.BuildContext) (*node, error) {
			return &node{kind: "encode", c: engine.Contract{Needs: []engine.Need{{Key: engine.KeyMedia}}, Provides: []engine.AnyKey{KeyEC}, Role: "encode", Outputs: []engine.Output{{Name: "items", Type: "int"}}}}, nil
		})
	reg("t-prefill", "test: provides kv, needs tokens on chat with tokens-in", `"status": {"type": "integer"}, "tokens_in": {"type": "boolean"}`, false,
		func(p params, b *engine.BuildContext) (*node, error) {
			c := engine.Contract{Provides: []engine.AnyKey{KeyKV}, Role: "prefill"}
			ti := b.Defaults.TokensIn
			if p.TokensIn != nil {
				ti = *p.TokensIn
			}
			if ti {
				c.Needs = []engine.Need{{Key: engine.KeyTokens, Routes: []engine.Route{engine.RouteChat}}}
			}
			return &node{kind: "fail-or-ok", c: c}, nil
		})
	reg("t-decode", "test: terminal responder", `"status": {"type": "integer"}`, false,
		func(p params, _ *engine.BuildContext) (*node, error) {
			return &node{kind: "respond", c: engine.Contract{Responds: true, Terminal: true, Role: "decode"}}, nil
		})
	// t-gate stands for the async broker: it answers queued requests and
	// lets the others through (Contract.Gate).
	reg("t-gate", "test: a gate that answers some requests and passes the others", "", false,
		func(p params, _ *engine.BuildContext) (*node, error) {
			return &node{kind: "noop", c: engine.Contract{Responds: true, Gate: true}}, nil
		})
	// t-mute claims to answer but never does: a broken node type, the only
	// way left past the ending proof to the run's "no node answered" net.
	reg("t-mute", "test: a terminal responder that succeeds without answering", "", false,
		func(p params, _ *engine.BuildContext) (*node, error) {
			return &node{kind: "noop", c: engine.Contract{Responds: true, Terminal: true, Role: "decode"}}, nil
		})
	reg("t-noop", "test: does nothing", `"outputs": {"type": "object"}`, false, func(p params, _ *engine.BuildContext) (*node, error) {
		// Its outputs are its params.outputs, declared with the CEL type of
		// each value (integral numbers are int).
		n := &node{kind: "noop"}
		for k, v := range p.Outputs {
			t := "dyn"
			switch x := v.(type) {
			case bool:
				t = "bool"
			case string:
				t = "string"
			case float64:
				t = "double"
				if x == float64(int64(x)) {
					t, p.Outputs[k] = "int", int64(x)
				}
			}
			n.c.Outputs = append(n.c.Outputs, engine.Output{Name: k, Type: t})
		}
		return n, nil
	})
	reg("t-fail", "test: fails", `"kind": {"enum": ["bad_gateway", "rejected", "timeout", "internal"]}, "status": {"type": "integer"}`, false,
		func(p params, _ *engine.BuildContext) (*node, error) {
			return &node{kind: "fail"}, nil
		})
	reg("t-panic", "test: panics", "", false, func(p params, _ *engine.BuildContext) (*node, error) {
		return &node{kind: "panic"}, nil
	})
	reg("t-survivor", "test: survives the end of the run", "", false, func(p params, _ *engine.BuildContext) (*node, error) {
		return &node{kind: "noop", c: engine.Contract{SurvivesEnd: true}}, nil
	})
}

type node struct {
	kind  string
	c     engine.Contract
	p     params
	delay time.Duration
}

func (n *node) Contract() engine.Contract { return n.c }

func (n *node) Run(ctx context.Context, x *engine.Exec) engine.Result {
	id := x.NodeID
	if x.Index >= 0 {
		id += "[" + strconv.Itoa(x.Index) + "]"
	}
	Log(x.Run, "start "+id)
	defer Log(x.Run, "end "+id)
	if n.delay > 0 {
		t := time.NewTimer(n.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return engine.Result{Err: ctx.Err()}
		}
	}
	if err := ctx.Err(); err != nil {
		return engine.Result{Err: err}
	}
	switch n.kind {
	case "panic":
		panic("t-panic")
	case "fail":
		return fail(n.p.Kind, n.p.Status)
	case "fetch":
		x.Run.State.Media = mediaOf(x.Run.Req.Body)
	case "render":
		x.Run.State.Tokens = engine.Tokens{Known: true, FromRender: true, IDs: make([]int64, 8)}
		for i := range x.Run.State.Media {
			x.Run.State.Media[i].Hash = "h" + strconv.Itoa(i)
		}
	case "respond":
		st := n.p.Status
		if st == 0 {
			st = 200
		}
		if st >= 300 {
			return engine.Result{HTTPStatus: st, Header: http.Header{"X-Hint": {"p1"}},
				Err: &engine.Error{Kind: engine.KindUpstreamRejected, Item: -1, Status: st}}
		}
		w, ok := x.Run.Answer()
		if ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(st)
			_, _ = w.Write([]byte(`{"answered_by":"` + x.NodeID + `"}`))
		}
		return engine.Result{HTTPStatus: st, Responded: ok}
	case "encode", "fail-or-ok":
		if n.p.Status >= 300 {
			return fail("", n.p.Status)
		}
	}
	res := engine.Result{HTTPStatus: n.p.Status}
	if n.p.Outputs != nil {
		res.Outputs = n.p.Outputs
	}
	return res
}

// Merge makes t-encode a Merger: its output "items" is the item count.
func (n *node) Merge(_ context.Context, _ *engine.Exec, items []engine.Result) engine.Result {
	return engine.Result{Outputs: map[string]any{"items": int64(len(items))}}
}

func fail(kind string, status int) engine.Result {
	switch kind {
	case "timeout":
		return engine.Result{Err: engine.Errorf(engine.KindUpstreamTimeout, "assumed ttfb timeout")}
	case "internal":
		return engine.Result{Err: engine.Errorf(engine.KindInternal, "assumed internal error")}
	case "rejected":
		if status == 0 {
			status = 400
		}
		return engine.Result{HTTPStatus: status, Err: &engine.Error{Kind: engine.KindUpstreamRejected, Item: -1, Status: status}}
	}
	if status == 0 {
		status = 503
	}
	return engine.Result{HTTPStatus: status, Err: &engine.Error{Kind: engine.KindBadGateway, Item: -1, Status: status, Msg: "upstream answered HTTP " + strconv.Itoa(status)}}
}

// mediaOf counts image_url parts of a chat body (enough for tests).
func mediaOf(body []byte) []engine.MediaItem {
	var chat struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &chat)
	var out []engine.MediaItem
	for _, m := range chat.Messages {
		var parts []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Content, &parts) != nil {
			continue
		}
		for _, p := range parts {
			if p.Type == "image_url" {
				out = append(out, engine.MediaItem{Index: len(out), Modality: "image", Part: len(out), Type: "image/png"})
			}
		}
	}
	return out
}

// KeyEC and KeyKV stand for the data the real encode and prefill types
// hand on (their keys live in nodes/internal, out of this package's reach);
// a key's name is its identity, so contracts naming these check the same.
var (
	KeyEC = engine.NewKey[struct{}]("ec")
	KeyKV = engine.NewKey[struct{}]("kv")
)

// eventsKey is the run's event log (Log, Events).
var eventsKey = engine.NewKey[*events]("nodetest.events")

type events struct {
	mu  sync.Mutex
	log []string
}

// Log appends an event to the run's event log.
func Log(r *engine.Run, ev string) {
	e := eventsKey.GetOrMake(r, func() *events { return &events{} })
	e.mu.Lock()
	e.log = append(e.log, ev)
	e.mu.Unlock()
}

// Events returns a copy of the run's event log.
func Events(r *engine.Run) []string {
	e := eventsKey.GetOrMake(r, func() *events { return &events{} })
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

var _ engine.Node = (*node)(nil)
var _ engine.Merger = (*node)(nil)

// RegisterStandIns registers permissive stand-ins under the shipped type
// names (fetch-media, render, conditional-decode, encode, prefill, decode)
// for each name not registered yet, so documentation examples load in
// binaries that do not link the real node types. Their params schemas
// accept any object; their contracts mimic the real types.
func RegisterStandIns() {
	Register()
	standIns.Do(func() {
		for _, s := range []struct {
			name string
			fan  bool
			c    engine.Contract
			kind string
		}{
			{"fetch-media", false, engine.Contract{Provides: []engine.AnyKey{engine.KeyMedia}}, "fetch"},
			{"render", false, engine.Contract{Provides: []engine.AnyKey{engine.KeyTokens, engine.KeyFeatures}, Role: "render"}, "render"},
			{"conditional-decode", false, engine.Contract{Responds: true, Role: "decode"}, "respond"},
			{"encode", true, engine.Contract{Needs: []engine.Need{{Key: engine.KeyMedia}}, Provides: []engine.AnyKey{KeyEC}, Role: "encode"}, "encode"},
			{"prefill", false, engine.Contract{Provides: []engine.AnyKey{KeyKV}, Role: "prefill"}, "fail-or-ok"},
			{"decode", false, engine.Contract{Responds: true, Terminal: true, Role: "decode"}, "respond"},
		} {
			if _, ok := engine.LookupType(s.name); ok {
				continue
			}
			s := s
			engine.Register(engine.NodeType{Name: s.name, Doc: "stand-in for tests", FanOut: s.fan,
				Schema: []byte(`{"type":"object"}`),
				Build: func(b *engine.BuildContext, raw json.RawMessage) (engine.Node, error) {
					c := s.c
					if s.name == "prefill" && b.Defaults.TokensIn {
						c.Needs = []engine.Need{{Key: engine.KeyTokens, Routes: []engine.Route{engine.RouteChat}}}
					}
					return &node{kind: s.kind, c: c}, nil
				}})
		}
	})
}

var standIns sync.Once
