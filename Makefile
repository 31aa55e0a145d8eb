# celflow — see README.md. Every target works on a fresh machine with Go on PATH.
GO      ?= go
BIN     := bin/celflow
# The tools are binaries of their own so that the serving binary carries none of them.
SIM_BIN   := bin/celflow-sim
BENCH_BIN := bin/celflow-bench
DEMO_BIN  := bin/celflow-demo
CMDS    := ./cmd/celflow ./cmd/celflow-sim ./cmd/celflow-bench ./cmd/celflow-demo
PKGS    := ./...
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# -X main.version stamps every command's main.version: `celflow --version`, celflow_build_info
# and SARIF's driver version report it (cmd/internal/buildversion).
LDFLAGS := -s -w -X main.version=$(VERSION)
# grpcnotrace: gRPC (linked through the OTLP trace exporters) leaves out its golang.org/x/net/trace
# debug pages, which celflow never serves; they pull in html/template and keep the linker from
# dropping unused methods: 29.2 MiB -> 21.7 MiB for bin/celflow, nothing celflow does changes.
TAGS    := grpcnotrace
# The serving binary's size budget (stripped): 25 MiB.
MAX_BIN_BYTES := 26214400

.PHONY: image deploy-manifests build test test-race test-unit test-e2e lint validate bench bench-go demo trace-demo clean fuzz fuzz-short

## build: bin/celflow (the serving binary) and the tools bin/celflow-sim, bin/celflow-bench,
## bin/celflow-demo, in one go build.
build: $(BIN)

$(BIN) $(SIM_BIN) $(BENCH_BIN) $(DEMO_BIN): FORCE
	$(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o bin/ $(CMDS)
	@size=$$(wc -c <$(BIN)); if [ $$size -gt $(MAX_BIN_BYTES) ]; then \
	  echo "$(BIN) is $$size bytes, over its $(MAX_BIN_BYTES)-byte budget"; exit 1; fi
FORCE:

## image: the OCI image, without a container daemon or a registry: a static (CGO_ENABLED=0) build
## of ./cmd/celflow with the same flags, laid by .ci/image (go-containerregistry, no base image to
## pull) as an OCI image layout in bin/image/oci, user 65532, the version, commit and source in
## its org.opencontainers.image.* labels. Push it with `crane push bin/image/oci REF` or
## `skopeo copy oci:bin/image/oci docker://REF` (docs/deploy.md).
IMAGE_DIR    ?= bin/image
IMAGE_SOURCE ?= https://github.com/celflow/celflow
image:
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $(IMAGE_DIR)/celflow ./cmd/celflow
	cd .ci/image && $(GO) run -mod=readonly . --binary $(CURDIR)/$(IMAGE_DIR)/celflow --out $(CURDIR)/$(IMAGE_DIR)/oci \
	  --version '$(VERSION)' --revision "$$(git rev-parse HEAD 2>/dev/null)" --source '$(IMAGE_SOURCE)' \
	  --created "$$(git log -1 --format=%ct 2>/dev/null || echo 0)"

## deploy-manifests: regenerate the plain manifests docs/deploy/*.yaml from the Helm chart
## (docs/deploy/helm/celflow, default values) with the pinned helm .ci/kube.sh builds (cached);
## .ci/kube's TestManifestsCurrent fails in CI when they and the chart disagree.
deploy-manifests:
	cd .ci/kube && KUBE_BIN="$$(bash ../kube.sh helm)" $(GO) test -count=1 -run TestManifestsCurrent . -args -update

## test: lint, unit tests (which replay every committed fuzz input in testdata/fuzz as a
## regression case), workflow validation and the end-to-end suite (real processes on
## 127.0.0.1). Deterministic: random fuzzing is `make fuzz`, never part of make test.
test: lint test-unit validate test-e2e

## test-race: the unit suite under the race detector (CI runs it after make test).
test-race:
	$(GO) test -race -count=1 $(PKGS)

test-unit:
	$(GO) test -count=1 $(PKGS)

## test-e2e: the built binaries (celflow as coordinator, celflow-sim as workers and gateway),
## driven by real OpenAI clients (openai-go, and the npm openai package when
## testdata/e2e/node/node_modules exists); then the quick benchmark (celflow-bench).
E2E_ENV := CELFLOW_BIN=$(CURDIR)/$(BIN) CELFLOW_SIM_BIN=$(CURDIR)/$(SIM_BIN) \
	CELFLOW_BENCH_BIN=$(CURDIR)/$(BENCH_BIN) CELFLOW_DEMO_BIN=$(CURDIR)/$(DEMO_BIN)
test-e2e: build
	$(E2E_ENV) $(GO) test -count=1 -tags e2e ./cmd/celflow/e2e/...
	$(E2E_ENV) $(GO) test -count=1 -run QuickBench ./cmd/internal/bench

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## validate: every shipped workflow must load (ACCEPTANCE 32).
validate: build
	$(BIN) validate workflows/*.yaml

## bench: Go micro-benchmarks of the hot path, then the load comparison (docs/benchmarks.md).
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2000x ./engine/... ./nodes/...

## bench runs the Go micro-benchmarks itself and writes them into the same report, with the
## size of the image make image writes.
bench: build image
	$(BENCH_BIN) --bin $(BIN) --out docs/benchmarks.md

## demo: simulated workers + celflow on loopback, four requests through the E/P/D workflow.
demo: build
	$(DEMO_BIN)

## trace-demo: the demo with tracing on. Builds Jaeger once (.ci/jaeger.sh, cached), starts it
## with .ci/jaeger-config.yaml on its default loopback ports (JAEGER_*_PORT move them), runs
## bin/celflow-demo exporting to it, and prints how to read the traces back from the query API.
## From a terminal Jaeger stays up until Enter or Ctrl-C; otherwise it stops at once.
trace-demo: build
	@set -eu; \
	jaeger=$$(bash .ci/jaeger.sh); \
	otlp=http://127.0.0.1:$${JAEGER_OTLP_HTTP_PORT:-4318}; query=http://127.0.0.1:$${JAEGER_QUERY_HTTP_PORT:-16686}; \
	log=$$(mktemp); out=$$(mktemp); \
	"$$jaeger" --config .ci/jaeger-config.yaml >"$$log" 2>&1 & pid=$$!; \
	trap 'kill $$pid 2>/dev/null || true; wait $$pid 2>/dev/null || true; rm -f "$$log" "$$out"' EXIT; \
	trap 'exit 130' INT TERM; \
	for i in $$(seq 300); do \
	  curl -sf -o /dev/null "$$query/api/services" && break; \
	  kill -0 $$pid 2>/dev/null || { cat "$$log"; echo "trace-demo: jaeger exited (ports in use? set JAEGER_*_PORT)"; exit 1; }; \
	  [ $$i -lt 300 ] || { cat "$$log"; echo "trace-demo: jaeger not ready after 30s"; exit 1; }; \
	  sleep 0.1; \
	done; \
	echo "jaeger: OTLP $$otlp, query API $$query (in-memory store)"; \
	OTEL_EXPORTER_OTLP_ENDPOINT=$$otlp OTEL_SERVICE_NAME=celflow $(DEMO_BIN) | tee "$$out"; \
	sleep 0.5; \
	echo; echo "Traces in Jaeger (spans per trace, from the query API):"; \
	for id in $$(sed -n 's/^   trace: \([0-9a-f]*\)$$/\1/p' "$$out"); do \
	  printf '  %s  %s spans\n' $$id $$(curl -sf "$$query/api/traces/$$id" | grep -o '"operationName"' | wc -l); \
	done; \
	id=$$(sed -n 's/^   trace: \([0-9a-f]*\)$$/\1/p' "$$out" | sed -n 3p); \
	echo; echo "Read one back (the image chat):"; \
	echo "  curl -s $$query/api/traces/$$id | jq '.data[0].spans[] | {operationName, references, tags}'"; \
	echo "  curl -s '$$query/api/traces?service=celflow&limit=20'"; \
	echo "The UI at $$query/ is a placeholder: a go build of Jaeger embeds no UI assets (release builds do)."; \
	if [ -t 0 ]; then echo; echo "Jaeger stays up: press Enter (or Ctrl-C) to stop it."; read _ || true; fi

clean:
	rm -rf bin

## fuzz: every Go fuzz target, FUZZTIME each (default 15s), one after the other. A crasher is
## written to <package>/testdata/fuzz/FuzzX/ and its path and bytes are printed: commit it.
FUZZTIME ?= 15s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) bash .ci/fuzz.sh

## fuzz-short: the same for 4s per target (about 1.5 minutes); CI runs it as a report that
## prints any new crasher without failing the build (commit the printed input).
fuzz-short:
	GO=$(GO) FUZZTIME=4s bash .ci/fuzz.sh
