package upstream

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestParseAdapters(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       map[string]bool
		err        bool
	}{
		{"vLLM with an adapter", `{"object":"list","data":[{"id":"base","parent":null,"root":"/m"},{"id":"sql","parent":"base","root":"/a"}]}`,
			map[string]bool{"base": false, "sql": true}, false},
		{"no parent member", `{"data":[{"id":"m"}]}`, map[string]bool{"m": false}, false},
		{"parent is itself", `{"data":[{"id":"m","parent":"m"}]}`, map[string]bool{"m": false}, false},
		{"parent not a string", `{"data":[{"id":"m","parent":7}]}`, map[string]bool{"m": false}, false},
		{"bad ids skipped", `{"data":[{"id":""},{"id":7,"parent":"x"},"x",{"id":"a\u0000b","parent":"x"},{"id":"ok","parent":"b"}]}`,
			map[string]bool{"ok": true}, false},
		{"no data", `{"object":"list"}`, nil, true},
		{"not JSON", `<html>`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAdapters([]byte(tc.body))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if a, ok := got[k]; !ok || a != v {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestBlockNames(t *testing.T) {
	tk := toks(40, 1) // two full blocks of 16
	names := func(k CacheKey) []uint64 {
		t.Helper()
		hs, ok := blockNames(k, 16, nil)
		if !ok {
			t.Fatalf("%+v: not nameable", k)
		}
		return hs
	}
	base := names(CacheKey{Tokens: tk})
	if len(base) != 2 {
		t.Fatalf("%d names, want 2", len(base))
	}
	if got := names(CacheKey{Tokens: tk, Model: "m"}); got[0] != base[0] || got[1] != base[1] {
		t.Fatal("the model name alone changed the names (only LoRA does)")
	}
	a, b := names(CacheKey{Tokens: tk, LoRA: "a"}), names(CacheKey{Tokens: tk, LoRA: "b"})
	if a[0] == base[0] || a[0] == b[0] || a[1] == base[1] {
		t.Fatal("an adapter shares block names with the base model or another adapter")
	}
	// An item beginning at 20 changes the second block on, not the first.
	i1 := names(CacheKey{Tokens: tk, MM: []string{"img1"}, MMOffsets: []int{20}})
	i2 := names(CacheKey{Tokens: tk, MM: []string{"img2"}, MMOffsets: []int{20}})
	if i1[0] != base[0] || i1[1] == base[1] || i1[1] == i2[1] {
		t.Fatalf("item folding: %x %x %x", base, i1, i2)
	}
	// Where it begins matters.
	if i3 := names(CacheKey{Tokens: tk, MM: []string{"img1"}, MMOffsets: []int{3}}); i3[0] == base[0] || i3[1] == i1[1] {
		t.Fatal("an item in the first block did not change the first block's name")
	}
	for _, k := range []CacheKey{
		{Tokens: tk, MM: []string{"x"}},                               // no offsets
		{Tokens: tk, MM: []string{"x", "y"}, MMOffsets: []int{4}},     // too few
		{Tokens: tk, MM: []string{"x", "y"}, MMOffsets: []int{20, 4}}, // not in order
		{Tokens: tk, MM: []string{"x"}, MMOffsets: []int{40}},         // past the prompt
		{Tokens: tk, MM: []string{"x"}, MMOffsets: []int{-1}},         // negative
	} {
		if _, ok := blockNames(k, 16, nil); ok {
			t.Errorf("%v %v: named, want not nameable", k.MM, k.MMOffsets)
		}
	}
}

// modelServer serves a vLLM model list with one adapter.
func modelServer(t *testing.T, list string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathModels {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(list))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// keySource records the keys it is asked about and says every endpoint
// holds every prompt under the base model, nothing under an adapter.
type keySource struct {
	mu   sync.Mutex
	lora []string
}

func (s *keySource) Cached(_ string, k CacheKey) (int, bool) {
	s.mu.Lock()
	s.lora = append(s.lora, k.LoRA)
	s.mu.Unlock()
	if k.LoRA != "" {
		return 0, true
	}
	return len(k.Tokens) / 16 * 16, true
}

func waitAdapters(t *testing.T, c *Client, pool, model string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, known := c.AdapterOf(pool, model); known {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool's adapter list never arrived")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A request naming an adapter the pool lists is keyed by it (the source is
// asked with LoRA set, the prediction index keeps its blocks apart); one
// naming the base model is not; before the list arrives a named model is
// scored on load alone.
func TestCacheKeyLoRAFromModels(t *testing.T) {
	const list = `{"object":"list","data":[{"id":"base","parent":null},{"id":"sql","parent":"base"}]}`
	u1, u2 := modelServer(t, list), modelServer(t, list)
	c, err := New(Config{Mode: modeDirect, Picker: pickCacheAware, Pools: map[Role][]Endpoint{RoleDecode: {{URL: u1}, {URL: u2}}}})
	if err != nil {
		t.Fatal(err)
	}
	prompt := toks(40, 3)

	// Before the list: load alone, and nothing recorded for it.
	first := mustPickKey(t, c, "", CacheKey{Tokens: prompt, Model: "sql"})
	if first.Route == nil || first.Route.Predicted != 0 || first.Route.PromptTokens != 40 {
		t.Fatalf("route before the list = %+v, want no prediction for 40 tokens", first.Route)
	}
	c.RecordPrefix(first, prompt)
	first.Done(false)
	waitAdapters(t, c, "", "sql")
	if a, _ := c.AdapterOf("", "sql"); !a {
		t.Fatal("sql not learned as an adapter")
	}
	if a, _ := c.AdapterOf("", "base"); a {
		t.Fatal("base learned as an adapter")
	}

	// The prediction index: the base model's blocks are not the adapter's.
	tb := mustPickKey(t, c, "", CacheKey{Tokens: prompt, Model: "base"})
	if tb.Route.Predicted != 0 {
		t.Fatalf("the adapter's pick before the list was recorded: %+v", tb.Route)
	}
	c.RecordPrefix(tb, prompt)
	tb.Done(false)
	for range 4 {
		ta := mustPickKey(t, c, "", CacheKey{Tokens: prompt, Model: "sql"})
		if ta.Route.Predicted != 0 {
			t.Fatalf("the adapter's request predicted the base model's blocks: %+v", ta.Route)
		}
		ta.Done(false)
	}
	again := mustPickKey(t, c, "", CacheKey{Tokens: prompt, Model: "base"})
	if again.Base != tb.Base || again.Route.Predicted != 32 {
		t.Fatalf("the base model's repeat: %s %+v, want a 32-token hit on %s", again.Base, again.Route, tb.Base)
	}
	again.Done(false)
	// Under the adapter, recorded, then predicted.
	ta := mustPickKey(t, c, "", CacheKey{Tokens: prompt, Model: "sql"})
	c.RecordPrefix(ta, prompt)
	ta.Done(false)
	if tg := mustPickKey(t, c, "", CacheKey{Tokens: prompt, Model: "sql"}); tg.Base != ta.Base || tg.Route.Predicted != 32 {
		t.Fatalf("the adapter's repeat: %+v", tg.Route)
	} else {
		tg.Done(false)
	}

	// The source is asked with the adapter's name.
	src := &keySource{}
	c.setCacheSource("", src)
	if tg := mustPickKey(t, c, "", CacheKey{Tokens: prompt, Model: "sql"}); tg.Route.Predicted != 0 || tg.Route.Source != SourceEvents {
		t.Fatalf("adapter via the source: %+v", tg.Route)
	} else {
		tg.Done(false)
	}
	if tg := mustPickKey(t, c, "", CacheKey{Tokens: prompt, Model: "base"}); tg.Route.Predicted != 32 {
		t.Fatalf("base via the source: %+v", tg.Route)
	} else {
		tg.Done(false)
	}
	// And so is conditional decode's prediction.
	if tg, hit := c.PredictHitKey("", CacheKey{Tokens: prompt, Model: "sql"}); hit {
		t.Fatalf("predicted a hit for the adapter: %+v", tg.Route)
	}
	if tg, hit := c.PredictHitKey("", CacheKey{Tokens: prompt, Model: "base"}); !hit {
		t.Fatal("no hit predicted for the base model")
	} else {
		tg.Done(false)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	seen := map[string]bool{}
	for _, l := range src.lora {
		seen[l] = true
	}
	if !seen["sql"] || !seen[""] {
		t.Fatalf("source asked with LoRA %v, want sql and the base model", src.lora)
	}
}

// A pool whose endpoints do not list models (404) scores every model as the
// base model once it has tried: today's behaviour.
func TestCacheKeyNoModelList(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	c, err := New(Config{Mode: modeDirect, Picker: pickCacheAware, Pools: map[Role][]Endpoint{RoleDecode: {{URL: srv.URL}}}})
	if err != nil {
		t.Fatal(err)
	}
	mustPickKey(t, c, "", CacheKey{Tokens: toks(40, 1), Model: "m"}).Done(false)
	waitAdapters(t, c, "", "m")
	tg := mustPickKey(t, c, "", CacheKey{Tokens: toks(40, 1), Model: "m"})
	c.RecordPrefix(tg, toks(40, 1))
	tg.Done(false)
	if tg := mustPickKey(t, c, "", CacheKey{Tokens: toks(40, 1), Model: "m"}); tg.Route.Predicted != 32 {
		t.Fatalf("route %+v, want a 32-token hit", tg.Route)
	}
}

// Without the cache-aware picker, conditional decode's prediction index
// still keeps an adapter's blocks apart from the base model's.
func TestPredictHitLoRARoundRobin(t *testing.T) {
	const list = `{"object":"list","data":[{"id":"base","parent":null},{"id":"sql","parent":"base"}]}`
	c, err := New(Config{Mode: modeDirect, Pools: map[Role][]Endpoint{RoleDecode: {{URL: modelServer(t, list)}}}})
	if err != nil {
		t.Fatal(err)
	}
	prompt := toks(40, 5)
	if _, hit := c.PredictHitKey("", CacheKey{Tokens: prompt, Model: "sql"}); hit {
		t.Fatal("a hit on an empty index")
	}
	waitAdapters(t, c, "", "sql")
	tg := mustPickKey(t, c, "", CacheKey{Tokens: prompt, Model: "sql"})
	c.RecordPrefix(tg, prompt)
	tg.Done(false)
	if _, hit := c.PredictHitKey("", CacheKey{Tokens: prompt, Model: "base"}); hit {
		t.Fatal("the base model predicted a hit on the adapter's blocks")
	}
	if tg, hit := c.PredictHitKey("", CacheKey{Tokens: prompt, Model: "sql"}); !hit {
		t.Fatal("the adapter's repeat predicted a miss")
	} else {
		tg.Done(false)
	}
}

// One endpoint that never answers its model list does not hold back what
// the others said.
func TestAdaptersOneEndpointHangs(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); hang.Close() })
	ok := modelServer(t, `{"data":[{"id":"base"},{"id":"sql","parent":"base"}]}`)
	c, err := New(Config{Mode: modeDirect, Picker: pickCacheAware, Pools: map[Role][]Endpoint{RoleDecode: {{URL: hang.URL}, {URL: ok}}}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mustPickKey(t, c, "", CacheKey{Tokens: toks(40, 1), Model: "sql"}).Done(false)
	waitAdapters(t, c, "", "sql")
	if a, _ := c.AdapterOf("", "sql"); !a {
		t.Fatal("sql not an adapter")
	}
	if d := time.Since(start); d >= adapterTimeout {
		t.Fatalf("the list took %s: it waited for the endpoint that hangs", d)
	}
}
