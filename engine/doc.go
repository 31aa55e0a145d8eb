// Package engine is celflow's core: it compiles a YAML workflow into an
// immutable DAG and walks that DAG once per request. It knows workflows,
// CEL, the graph, per-request data and errors; it imports no inference
// package (no node type, connector or server), so what a worker, a media
// part or a KV hand-off looks like on the wire lives above it.
//
// The package's files, by concern:
//
//   - the node contract and a request's run: node.go (NodeType, Node,
//     Contract, BuildContext and its services, Closer, Run, State),
//     key.go (typed per-request keys, Key[T]), media.go (the workflow
//     language's media and tokens), outcome.go, errors.go (the closed
//     error set, Classified, the one mapping to HTTP statuses);
//   - the compiler, YAML to Workflow: load.go (LoadOptions, Load,
//     LoadFile), loaddoc.go (the typed document), loadnodes.go (params and
//     Build), loadcel.go (guards and edge conditions), loadgraph.go,
//     loadrules.go (rule ids), target.go (target rules);
//   - the static analysis the compiler runs: loaddataflow.go (needs and
//     provides on every path), loadpaths.go (the ending proof, decidable
//     guards);
//   - the scheduler: sched.go, exec.go (attempts, retries, timeouts),
//     fanout.go, trace.go and retrylog.go (spans and retry logs);
//   - the tooling views of the same compiled workflow: explain.go
//     (run/skip/omit for one request with stubbed nodes) and testsblock.go
//     (a workflow's tests: block), which run the scheduler itself, never a
//     second implementation of it;
//   - workflow.go: the compiled Workflow, its Serve and Close.
//
// Subpackages: graph (the pure DAG) and celenv (the CEL environment).
// docs/architecture.md draws the whole tree.
package engine
