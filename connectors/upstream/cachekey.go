package upstream

import "hash/fnv"

// Block names of a CacheKey in the prediction index (prefix.go). vLLM's
// block hashes include the LoRA adapter a request runs under and the
// identifiers of the multimodal items in each block, so the index names
// blocks the same way: an adapter starts its own chain (loraSeed), and an
// item's hash is folded into the block where its placeholder begins. Two
// prompts with the same token ids under different adapters, or with
// different images behind the same placeholder tokens, then share no block.

// loraSeed is the name of the empty prefix under adapter lora ("" is the
// base model's, hashSeed).
func loraSeed(lora string) uint64 {
	if lora == "" {
		return hashSeed
	}
	return mix64(hashSeed ^ strHash("lora\x00"+lora))
}

func strHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64() | 1
}

// blockNames appends to dst the chained names of k's full blocks of bs
// tokens. ok is false when k has items without one offset each (MMOffsets
// missing, of another length, or not ascending and within the prompt):
// such a prompt's blocks cannot be named, and it gets no prediction.
func blockNames(k CacheKey, bs int, dst []uint64) (names []uint64, ok bool) {
	if len(k.MM) > 0 {
		if len(k.MMOffsets) != len(k.MM) {
			return dst, false
		}
		for i, o := range k.MMOffsets {
			if o < 0 || o >= len(k.Tokens) || (i > 0 && o < k.MMOffsets[i-1]) {
				return dst, false
			}
		}
	}
	h := loraSeed(k.LoRA)
	j := 0 // next item to fold
	for i := 0; (i+1)*bs <= len(k.Tokens); i++ {
		h = chainHash(h, k.Tokens[i*bs:(i+1)*bs])
		for ; j < len(k.MM) && k.MMOffsets[j] < (i+1)*bs; j++ {
			h = mix64(h ^ strHash(k.MM[j])*0x9e3779b97f4a7c15)
		}
		dst = append(dst, h)
	}
	return dst, true
}

// PredictHitKey is PredictHit for a prompt named by k in the pool named
// pool ("" for the decode role's): the LoRA adapter and media items take
// part in the prediction as they do in the cache-aware picker's.
func (c *Client) PredictHitKey(name string, k CacheKey) (*Target, bool) {
	ci := c.impl
	if !ci.direct {
		return nil, false
	}
	p := ci.pools[roleIndex(RoleDecode)]
	if name != "" {
		p = ci.poolNamed(name)
	}
	return ci.predictHitIn(p, k)
}
