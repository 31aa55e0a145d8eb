# celflow — see README.md. Every target works on a fresh machine with Go on PATH.
GO      ?= go
BIN     := bin/celflow
PKGS    := ./...
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: build test test-unit test-e2e lint validate bench bench-go demo clean

build: $(BIN)

$(BIN): FORCE
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/celflow
FORCE:

## test: unit tests, workflow validation, then the end-to-end suite (real processes on 127.0.0.1).
test: lint test-unit validate test-e2e

test-unit:
	$(GO) test -count=1 $(PKGS)

## test-e2e: the built binary as coordinator and simulators, driven by real OpenAI clients
## (openai-go, and the npm openai package when testdata/e2e/node/node_modules exists).
test-e2e: build
	CELFLOW_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -tags e2e ./cmd/celflow/e2e/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## validate: every shipped workflow must load (ACCEPTANCE 32).
validate: build
	$(BIN) validate workflows/*.yaml

## bench: Go micro-benchmarks of the hot path, then the load comparison (docs/benchmarks.md).
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2000x ./engine/... ./nodes/...

bench: build bench-go
	$(BIN) bench --out docs/benchmarks.md

## demo: simulated workers + celflow on loopback, four requests through the E/P/D workflow.
demo: build
	$(BIN) demo

clean:
	rm -rf bin
