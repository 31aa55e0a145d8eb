// Package kvevents reads vLLM's KV cache events and keeps, per worker, an
// index of the blocks each one holds, keyed by token ids (issue 20).
//
// The wire format is vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py):
// a PUB socket sends multipart messages [topic, seq, payload], seq an 8-byte
// big-endian counter per publisher, payload a msgpack KVEventBatch as msgspec
// encodes it. Two encodings exist: vLLM releases whose structs are declared
// array_like=True send every struct as an array, a tagged union's tag first
// (["BlockStored", block_hashes, ...]); later ones send a map of named fields
// with the tag under "type". Both are read (Decode). A publisher may also
// bind a ROUTER replay endpoint: a request carrying a starting seq is
// answered with every buffered batch from there and an end marker (seq -1).
//
// The index (Index) does not use the engine's block hashes as keys: it
// rebuilds each block's key from the event's token ids with celflow's own
// chain hash (upstream.ChainHash), folding the LoRA adapter and multimodal
// item hashes in, so nothing about the engine's hash seed or algorithm has
// to match. The engine's hashes are kept only to apply BlockRemoved. The
// index answers upstream.CacheSource for direct-mode routing, and says "no
// trustworthy view" (ok false) for a worker that is not subscribed, has not
// delivered a batch yet, lost batches it could not replay, or went quiet.
//
// Subscribers (Hub) run either topology vLLM supports: a SUB socket dialling
// each worker's bound publisher, or one bound SUB endpoint the workers'
// publishers connect to, where the topic names the worker (llm-d's
// kv@<pod>@<model>).
package kvevents
