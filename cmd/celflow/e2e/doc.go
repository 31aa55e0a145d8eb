// Package e2e is celflow's end-to-end suite (build tag e2e; `make test-e2e`).
// It runs real processes on 127.0.0.1: the built celflow-sim binary
// (CELFLOW_SIM_BIN) as simulated vLLM workers and as the Inference Gateway
// stand-in (`celflow-sim gateway`), the built celflow binary (CELFLOW_BIN)
// as the coordinator (`celflow serve --config`), each built into a
// temporary directory when its variable is unset, plus a media
// server in the test process. Requests are sent with openai-go
// (WithMaxRetries(0)); every leg is asserted through the simulators'
// records (GET /sim/records), so a regression in any leg's path, headers or
// body shape fails the suite. Each test names, in `// ACCEPTANCE n`
// comments, the docs/acceptance.md items it covers.
package e2e
