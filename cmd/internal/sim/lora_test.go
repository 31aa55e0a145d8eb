package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/celflow/celflow/connectors/kvevents"
	"github.com/celflow/celflow/connectors/upstream"
)

// completeAs is complete under model: the worker's cached_tokens.
func completeAs(t *testing.T, url, model string, prompt []int64) int {
	t.Helper()
	ids, _ := json.Marshal(prompt)
	status, _, body := post(t, url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":1}`, model, ids))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var r struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Usage.Details.Cached
}

func TestLoRAFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []LoRAModule
		err  bool
	}{
		{[]string{"sql"}, []LoRAModule{{Name: "sql"}}, false},
		{[]string{"sql=base, chat=other", "x"}, []LoRAModule{{"sql", "base"}, {"chat", "other"}, {"x", ""}}, false},
		{[]string{"=base"}, nil, true},
		{[]string{"a,a"}, nil, true},
	} {
		var f loraFlag
		var err error
		for _, a := range tc.args {
			if err = f.Set(a); err != nil {
				break
			}
		}
		if (err != nil) != tc.err {
			t.Fatalf("%q: err %v, want error %v", tc.args, err, tc.err)
		}
		if !tc.err && fmt.Sprint([]LoRAModule(f)) != fmt.Sprint(tc.want) {
			t.Fatalf("%q: %v, want %v", tc.args, f, tc.want)
		}
	}
}

// A sim serving an adapter lists it with its parent, keeps its blocks apart
// from the base model's (cached_tokens, the probe) and names it in its KV
// events, which the index reads into the adapter's own key.
func TestSimLoRA(t *testing.T) {
	for _, enc := range []string{"map", "array"} {
		t.Run(enc, func(t *testing.T) { simLoRA(t, enc) })
	}
}

func simLoRA(t *testing.T, enc string) {
	s := startKVSim(t, "--lora", "sql,chat=other-base", "--kv-events-encoding", enc)
	resp, err := http.Get(s.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range list.Data {
		p := "<nil>"
		if m.Parent != nil {
			p = *m.Parent
		}
		got[m.ID] = p
	}
	if fmt.Sprint(got) != fmt.Sprint(map[string]string{"sim-model": "<nil>", "sql": "sim-model", "chat": "other-base"}) {
		t.Fatalf("/v1/models: %v", got)
	}

	h := hubFor(t, kvevents.Options{}, s)
	waitSubscribed(t, h, s)
	prompt := tokens(500, 40)
	if c := completeAs(t, s.url, "sim-model", prompt); c != 0 {
		t.Fatalf("first base request cached %d", c)
	}
	if c := completeAs(t, s.url, "sql", prompt); c != 0 {
		t.Fatalf("the adapter's first request reports %d cached: the base model's blocks", c)
	}
	if c := completeAs(t, s.url, "sql", prompt); c != 32 {
		t.Fatalf("the adapter's repeat cached %d, want 32", c)
	}
	if c := completeAs(t, s.url, "chat", prompt); c != 0 {
		t.Fatalf("another adapter reports %d cached", c)
	}
	waitKV(t, "the index to hold both keys", func() bool {
		b, _ := h.Index().Cached(s.url, upstream.CacheKey{Tokens: prompt})
		a, _ := h.Index().Cached(s.url, upstream.CacheKey{Tokens: prompt, LoRA: "sql"})
		c, _ := h.Index().Cached(s.url, upstream.CacheKey{Tokens: prompt, LoRA: "chat"})
		return b == 32 && a == 32 && c == 32
	})
	if n, _ := h.Index().Cached(s.url, upstream.CacheKey{Tokens: prompt, LoRA: "nope"}); n != 0 {
		t.Fatalf("an adapter never used holds %d in the index", n)
	}
	// The probe looks up an adapter's blocks by model.
	status, _, body := post(t, s.url+"/sim/cache/probe", fmt.Sprintf(`{"token_ids":%s,"model":"sql"}`, mustJSON(prompt)))
	if status != http.StatusOK || fmt.Sprint(decodeJSON(t, body)["cached_tokens"]) != "32" {
		t.Fatalf("probe %d: %s", status, body)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Issue 20, LoRA in the cache key: two real sims serving the base model
// and an adapter, KV events on, the cache-aware picker fed by the event
// index. A prompt sent under the base model and then under the adapter is
// never predicted a hit for the adapter on the base model's blocks, and
// over a mixed workload (each prompt under both, then repeats under both)
// the predictions the workers' cached_tokens confirm stay at 99% or more.
func TestLoRARoutingPrecision(t *testing.T) {
	a, b := startKVSim(t, "--lora", "sql"), startKVSim(t, "--lora", "sql")
	h := hubFor(t, kvevents.Options{}, a, b)
	waitSubscribed(t, h, a)
	waitSubscribed(t, h, b)
	c, err := upstream.New(upstream.Config{Mode: "direct", Picker: "cache-aware",
		Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: a.url}, {URL: b.url}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetCacheSource("decode", h.Source("decode")); err != nil {
		t.Fatal(err)
	}
	var predicted, confirmed, picks, hits int
	send := func(model string, prompt []int64) (string, int, int) {
		t.Helper()
		tg, err := c.PickKey(upstream.RoleDecode, "", upstream.CacheKey{Tokens: prompt, Model: model})
		if err != nil {
			t.Fatal(err)
		}
		cached := completeAs(t, tg.Base, model, prompt)
		tg.Done(false)
		pred := 0
		if tg.Route != nil {
			pred = tg.Route.Predicted
			tg.ObserveCached(cached)
		}
		picks++
		predicted += pred
		confirmed += min(pred, cached)
		if pred > 0 {
			hits++
		}
		// The next pick sees this one's blocks: wait for their events.
		lora := ""
		if model == "sql" {
			lora = model
		}
		waitKV(t, "the index to hold the prompt", func() bool {
			n, ok := h.Index().Cached(tg.Base, upstream.CacheKey{Tokens: prompt, LoRA: lora})
			return ok && n == len(prompt)/16*16
		})
		return tg.Base, pred, cached
	}
	// The adapter list arrives in the background from the first pick on.
	send("sim-model", tokens(9000, 20))
	waitKV(t, "the adapter list", func() bool { _, known := c.AdapterOf("", "sql"); return known })

	const n = 12
	prompts := make([][]int64, n)
	for i := range prompts {
		prompts[i] = tokens(10_000+i*1000, 16*(2+i%3)+5)
	}
	for i, p := range prompts {
		first, model := "sim-model", "sql"
		if i%2 == 1 {
			first, model = model, first
		}
		send(first, p)
		if _, pred, cached := send(model, p); pred != 0 || cached != 0 {
			t.Fatalf("prompt %d under %s after %s: predicted %d, worker cached %d (the other model's blocks are not its)", i, model, first, pred, cached)
		}
	}
	for round := range 2 {
		for i, p := range prompts {
			for _, model := range []string{"sim-model", "sql"} {
				if _, pred, cached := send(model, p); pred != cached || pred == 0 {
					t.Fatalf("round %d, prompt %d under %s: predicted %d, worker cached %d", round, i, model, pred, cached)
				}
			}
		}
	}
	if hits < 4*n {
		t.Fatalf("%d predicted hits in %d picks, want the %d repeats", hits, picks, 4*n)
	}
	if p := float64(confirmed) / float64(predicted); p < 0.99 {
		t.Fatalf("precision %.3f (%d of %d predicted tokens confirmed)", p, confirmed, predicted)
	}
	t.Logf("%d picks, %d predicted hits, precision %d/%d", picks, hits, confirmed, predicted)
}
