package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/celflow/celflow/connectors/kvevents"
	"github.com/celflow/celflow/connectors/upstream"
)

// generateWith sends a generate request with one image item (hash img at
// offset off, 6 placeholder tokens) and returns the worker's cached_tokens.
func generateWith(t *testing.T, url string, prompt []int64, img string, off int) int {
	t.Helper()
	body := fmt.Sprintf(`{"model":"sim-model","token_ids":%s,"sampling_params":{"max_tokens":1},`+
		`"features":{"mm_hashes":{"image":[%q]},"mm_placeholders":{"image":[{"offset":%d,"length":6}]}}}`,
		mustJSON(prompt), img, off)
	status, _, b := post(t, url+"/inference/v1/generate", body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	var r struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Usage.Details.Cached
}

// Issue 20, media in the cache key: the same token ids standing for two
// different images (the placeholder tokens are the same) share only the
// blocks before the image. Through two real sims with KV events, the
// cache-aware picker keyed by the items' hashes and offsets predicts
// exactly what the workers then report, from the event index and from the
// prediction index alike; keyed by token ids alone it would predict the
// other image's blocks.
func TestMediaRoutingPrecision(t *testing.T) {
	a, b := startKVSim(t), startKVSim(t)
	h := hubFor(t, kvevents.Options{}, a, b)
	waitSubscribed(t, h, a)
	waitSubscribed(t, h, b)
	for _, events := range []bool{true, false} {
		t.Run(fmt.Sprint("events=", events), func(t *testing.T) {
			c, err := upstream.New(upstream.Config{Mode: "direct", Picker: "cache-aware",
				Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: a.url}, {URL: b.url}}}})
			if err != nil {
				t.Fatal(err)
			}
			if events {
				if err := c.SetCacheSource("decode", h.Source("decode")); err != nil {
					t.Fatal(err)
				}
			}
			seed := 40_000
			if events {
				seed = 20_000
			}
			var predicted, confirmed, hits int
			send := func(prompt []int64, img string, off int) (int, int) {
				t.Helper()
				k := upstream.CacheKey{Tokens: prompt, MM: []string{img}, MMOffsets: []int{off}}
				tg, err := c.PickKey(upstream.RoleDecode, "", k)
				if err != nil {
					t.Fatal(err)
				}
				cached := generateWith(t, tg.Base, prompt, img, off)
				c.RecordPrefix(tg, prompt)
				tg.Done(false)
				pred := tg.Route.Predicted
				predicted += pred
				confirmed += min(pred, cached)
				if pred > 0 {
					hits++
				}
				if events {
					waitKV(t, "the index to hold the prompt", func() bool {
						n, ok := h.Index().Cached(tg.Base, upstream.CacheKey{Tokens: prompt, MM: []string{img}})
						return ok && n == len(prompt)/16*16
					})
				}
				return pred, cached
			}
			// 3 blocks and 5 tokens; the image's placeholder at 20 (second block).
			const n = 6
			for i := range n {
				p := tokens(seed+i*1000, 53)
				send(p, fmt.Sprintf("img-%d-a", i), 20)
				// Another image behind the same tokens: only the first block is shared.
				if pred, cached := send(p, fmt.Sprintf("img-%d-b", i), 20); pred > cached || cached > 16 {
					t.Fatalf("prompt %d, other image: predicted %d, worker cached %d (want at most the 16 tokens before the image)", i, pred, cached)
				}
			}
			for i := range n {
				p := tokens(seed+i*1000, 53)
				for _, img := range []string{"a", "b"} {
					if pred, cached := send(p, fmt.Sprintf("img-%d-%s", i, img), 20); pred != cached || pred != 48 {
						t.Fatalf("repeat of prompt %d with image %s: predicted %d, worker cached %d, want 48", i, img, pred, cached)
					}
				}
			}
			if p := float64(confirmed) / float64(predicted); p < 0.99 || hits < 2*n {
				t.Fatalf("precision %.3f (%d/%d), %d predicted hits", p, confirmed, predicted, hits)
			}
			t.Logf("precision %d/%d, %d predicted hits", confirmed, predicted, hits)
		})
	}
}
