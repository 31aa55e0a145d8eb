// Package sim is a vLLM-protocol worker simulator and an Inference Gateway
// stand-in for celflow's tests and demo. It plays vLLM's side of every leg in
// docs/protocol.md: render, encode, prefill and decode, with a deterministic fake
// tokenizer, OpenAI-exact JSON and SSE replies, real KV/EC hand-off checks
// between processes, a bounded prefix cache, fault injection and a ring of
// request records that tests read over HTTP (GET /sim/records).
//
// It is test infrastructure, not product code: bodies are decoded into small
// typed structs (the simulator is the worker, so it must read them), and
// nothing here is on celflow's hot path. docs/simulator.md is the user
// reference; keep it in step with the flags, endpoints and headers here.
package sim
