package leg

import (
	"fmt"
	"testing"

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
