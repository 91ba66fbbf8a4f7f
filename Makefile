# lardon3d-controller — the commands a newcomer needs are `make run` and `make test`.
GO      ?= go
BIN     := $(CURDIR)/bin
FUZZTIME ?= 3s

.PHONY: all build run test vet fmt-check unit fuzz schemas bench colmap-demo clean

all: build

## build: compile the controller and the synthetic step into bin/
build:
	$(GO) build -o $(BIN)/ ./cmd/...

## run: run the example pipeline in a fresh spool until every task is Done
run: build
	@spool=$${SPOOL:-$$(mktemp -d -t lardon3d-spool.XXXXXX)}; \
	chmod 700 "$$spool" && cp examples/tasks/*.yaml "$$spool"/ && \
	echo "spool: $$spool" && \
	PATH="$(BIN):$$PATH" $(BIN)/lardon3d-controller run --spool "$$spool" --exit-when-done --log-format console

## test: vet, format check, the race-enabled test suite, and brief fuzzing
test: vet fmt-check unit fuzz

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

unit: build
	LARDON3D_BIN=$(BIN) PATH="$(BIN):$$PATH" $(GO) test -race -timeout 15m ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseManifest$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./pkg/apis/v1alpha1
	$(GO) test -run '^$$' -fuzz '^FuzzReplaceStatus$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./pkg/spool

## schemas: regenerate schemas/task.schema.json from the Go types
schemas:
	$(GO) run ./hack/schemagen > schemas/task.schema.json

## bench: the side-by-side benchmark against tsp, parallel and xargs (about 35 min on 2 cores; root)
bench: build
	bash bench/run.sh

## colmap-demo: a real COLMAP reconstruction through the controller
colmap-demo: build
	bash examples/colmap/demo.sh

clean:
	rm -rf $(BIN)
