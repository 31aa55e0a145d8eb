package upstream

// CacheSource is a view of what each direct-mode worker holds in its KV
// cache that comes from outside celflow's own prediction index: the workers'
// KV events (issue 20). A pool asks its source first; where the source has
// no trustworthy view of an endpoint it uses the prediction index for that
// endpoint, as before. Implementations must be safe for concurrent use and
// must not block: they are called on the request path.
type CacheSource interface {
	// Cached returns how many leading tokens of k.Tokens the worker whose
	// configured base URL is base holds, counted in whole blocks of the
	// source's block size (so a multiple of it). ok is false when the source
	// has no trustworthy view of that worker (not subscribed, events stale
	// or gapped, or its predictions keep missing): the caller then uses the
	// prediction index for that worker.
	Cached(base string, k CacheKey) (tokens int, ok bool)
}

// CacheKey is what names a prompt's cached blocks: its token ids, the LoRA
// adapter it runs under ("" for the base model), and the hashes of its
// multimodal items in prompt order (nil for text). Two prompts with the same
// tokens but a different adapter or different images share no block.
//
// Model is the model name the leg's body carries: the cache-aware picker
// sets LoRA to it when the pool lists it as a LoRA adapter (adapters.go).
// MMOffsets, when given, are the placeholder offsets of MM's items in
// Tokens (the prediction index folds each item into the block where it
// begins; without them a prompt with items gets no prediction from it).
type CacheKey struct {
	Tokens    []int64
	LoRA      string
	MM        []string
	Model     string
	MMOffsets []int
}
