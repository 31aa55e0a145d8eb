package leg

import (
	"fmt"
	"testing"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// cacheKey names the prompt as vLLM's block hashes do: token ids, the
// model the leg's body carries (a target rule's over the client's), and the
// media items' hashes in placeholder order with their offsets; a prompt
// with an item render gave no hash has no key (load alone).
func TestCacheKey(t *testing.T) {
	ids := []int64{1, 2, 3, 4}
	for _, tc := range []struct {
		name   string
		known  bool
		model  string
		target []byte
		media  []engine.MediaItem
		want   string
	}{
		{"tokens unknown", false, "m", nil, nil, "[] <> [] []"},
		{"client model", true, "m", nil, nil, "[1 2 3 4] <m> [] []"},
		{"target rule's model", true, "m", []byte(`"sql"`), nil, "[1 2 3 4] <sql> [] []"},
		{"items by offset", true, "m", nil, []engine.MediaItem{{Hash: "b", Offset: 3}, {Hash: "a", Offset: 1}}, "[1 2 3 4] <m> [a b] [1 3]"},
		{"an item without hash", true, "m", nil, []engine.MediaItem{{Hash: "a", Offset: 1}, {Offset: 2}}, "[] <> [] []"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := &engine.Run{Req: &engine.Request{Model: tc.model}}
			run.State.Tokens = engine.Tokens{Known: tc.known, IDs: ids}
			run.State.Media = tc.media
			x := &engine.Exec{Run: run}
			if tc.target != nil {
				x.Target = &engine.LegTarget{Model: tc.target}
			}
			k := cacheKey(x)
			if got := fmt.Sprintf("%v <%s> %v %v", k.Tokens, k.Model, k.MM, k.MMOffsets); got != tc.want {
				t.Fatalf("key %s, want %s", got, tc.want)
			}
			if tc.media != nil && len(k.MM) > 0 && tc.media[0].Hash != "b" {
				t.Fatal("the run's media were reordered")
			}
			if k.LoRA != "" {
				t.Fatal("cacheKey set LoRA: the pool decides which models are adapters")
			}
		})
	}
}

// Conditional decode's prediction names the prompt by its items: the same
// token ids with another image are a miss, the same image a hit, and an
// item without a hash never predicts a hit (its blocks cannot be named).
func TestPredictHitMedia(t *testing.T) {
	c, err := upstream.New(upstream.Config{Mode: "direct",
		Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: "http://d0:8000"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 40)
	for i := range ids {
		ids[i] = int64(100 + i)
	}
	exec := func(media ...engine.MediaItem) *engine.Exec {
		run := &engine.Run{Req: &engine.Request{}}
		run.State.Tokens = engine.Tokens{Known: true, IDs: ids}
		run.State.Media = media
		return &engine.Exec{Run: run}
	}
	x := exec(engine.MediaItem{Hash: "cat", Offset: 20, Length: 4})
	tg, err := c.PickKey(upstream.RoleDecode, "", cacheKey(x))
	if err != nil {
		t.Fatal(err)
	}
	c.RecordPrefix(tg, ids)
	tg.Done(false)
	if tg, hit := PredictHit(x, c, ids); !hit {
		t.Fatal("the same image: predicted a miss")
	} else {
		tg.Done(false)
	}
	if _, hit := PredictHit(exec(engine.MediaItem{Hash: "dog", Offset: 20, Length: 4}), c, ids); hit {
		t.Fatal("another image behind the same tokens: predicted a hit")
	}
	if _, hit := PredictHit(exec(engine.MediaItem{Offset: 20, Length: 4}), c, ids); hit {
		t.Fatal("an item without a hash: predicted a hit")
	}
}
