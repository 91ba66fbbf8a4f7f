# lardon3d-controller — the commands a newcomer needs are `make run` and `make test`.
GO      ?= go
BIN     := $(CURDIR)/bin
# FUZZTIME is how long `make fuzz` explores each target (any go test -fuzztime value).
FUZZTIME ?= 1m
# RAPID_SEED pins the property tests (pgregory.net/rapid) in `make test`;
# `make test-random` runs them with fresh seeds.
RAPID_SEED ?= 1
# KUBE_ASSETS is the directory holding the kube-apiserver, etcd and kubelet the
# Kubernetes tests start (pkg/kube); hack/kube-test-binaries.sh builds them
# from Go modules on first use (minutes, once) into ~/.cache/lardon3d/kube.
KUBE_ASSETS = $${LARDON3D_KUBE_ASSETS:-$$(bash hack/kube-test-binaries.sh)}

.PHONY: all build deps run test test-vm test-vm-if-built vm-image test-kube kube-assets generate test-random vet fmt-check unit fuzz schemas bench bench-kube colmap-demo clean

all: build

# The git revision, stamped for --version where Go records none (in a git
# worktree, or with -buildvcs=false).
REVISION := $(shell git rev-parse HEAD 2>/dev/null)
DIRTY    := $(shell git status --porcelain 2>/dev/null | grep -q . && echo true)
LDFLAGS  := -X main.buildRevision=$(REVISION) -X main.buildModified=$(DIRTY)

## build: compile the controller, its node agent and the synthetic step into bin/
## (static: without cgo, a command starts some 4 ms sooner, and runs on any Linux)
build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -tags lardon3d_node -o $(BIN)/lardon3d-controller-node ./cmd/lardon3d-controller

## deps: install (as root, on Debian 12) the packages make test needs where missing:
## COLMAP, sqlite3, exiftool, vips, vim, python3, util-linux, qemu, debootstrap,
## containerd, runc, busybox-static, chromium (.ci/deps; waits for another apt's lock)
deps:
	bash .ci/deps

## run: run the example pipeline in a fresh spool until every task is Done
## (through the controller already running on this machine, when one does: the copied
## manifests name bin/lardon3d-synth by its absolute path, not found in that controller's PATH)
run: build
	@spool=$${SPOOL:-$$(mktemp -d -t lardon3d-spool.XXXXXX)}; \
	chmod 700 "$$spool" && cp examples/tasks/*.yaml "$$spool"/ && \
	sed -i 's|\[lardon3d-synth,|[$(BIN)/lardon3d-synth,|' "$$spool"/*.yaml && \
	echo "spool: $$spool" && \
	PATH="$(BIN):$$PATH" $(BIN)/lardon3d-controller run --spool "$$spool" --exit-when-done --join-running

## test: vet, format check, the race-enabled test suite (deterministic: fuzz seed corpora, fixed seeds)
## (vet builds as build does, without cgo: the two share their compiled packages)
test: vet fmt-check unit test-vm-if-built

vet:
	CGO_ENABLED=0 $(GO) vet ./...
	CGO_ENABLED=0 $(GO) vet -tags lardon3d_node ./cmd/lardon3d-controller

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## (cmd/lardon3d-controller's end-to-end suite is the longest package: 13 min measured
## on a loaded two-core machine before the multi-user tests came; it has 30 min)
unit: build
	assets=$(KUBE_ASSETS) && \
	LARDON3D_KUBE_ASSETS="$$assets" RAPID_SEED=$(RAPID_SEED) LARDON3D_BIN=$(BIN) PATH="$(BIN):$$PATH" $(GO) test -race -count=1 -timeout 30m ./...

## test-vm: the cgroup v2 suite in a virtual machine (Debian 12 kernel, systemd 252):
## the controller started as a delegated unit, behind a shell, by a user's manager, from
## a login shell; bursts, setsid escapes, pause, delete, kill -9 (about 4 min under TCG)
test-vm: vm-image
	image=$$(bash hack/vm/image.sh) && \
	LARDON3D_VM_IMAGE="$$image" $(GO) test -tags lardon3d_vm -count=1 -v -timeout 30m ./hack/vm

## test-vm-if-built: test-vm where the image is built (CI builds it: .ci/run)
test-vm-if-built:
	@if bash hack/vm/image.sh --cached >/dev/null; then $(MAKE) --no-print-directory test-vm; \
	else echo "the cgroup v2 VM suite is not run: no VM image (make vm-image builds it once, as root)"; fi

## vm-image: build (once) the VM image of the cgroup v2 suite into ~/.cache/lardon3d/vm (root; 2-10 min)
vm-image:
	@bash hack/vm/image.sh

## test-kube: only the Kubernetes tests (real etcd + kube-apiserver, the CRD, the node agents), verbosely
test-kube: build
	assets=$(KUBE_ASSETS) && \
	LARDON3D_KUBE_ASSETS="$$assets" LARDON3D_BIN=$(BIN) PATH="$(BIN):$$PATH" $(GO) test -race -count=1 -v -timeout 15m ./pkg/kubeapi/... ./pkg/kube/... ./pkg/agent/... && \
	LARDON3D_KUBE_ASSETS="$$assets" LARDON3D_BIN=$(BIN) PATH="$(BIN):$$PATH" $(GO) test -race -count=1 -v -timeout 15m -run '^TestNode' ./cmd/lardon3d-controller/

## kube-assets: build (once) and print the directory of kube-apiserver, etcd and kubelet
kube-assets:
	@bash hack/kube-test-binaries.sh

## generate: regenerate the deep copies and the CRD (deploy/crd) from the Go types
generate:
	bash hack/generate.sh

## test-random: the property and randomized tests with fresh seeds (on purpose, not in CI)
test-random: build
	assets=$(KUBE_ASSETS) && LARDON3D_KUBE_ASSETS="$$assets" RAPID_SEED=0 LARDON3D_RANDOM_SEED=random LARDON3D_BIN=$(BIN) PATH="$(BIN):$$PATH" $(GO) test -race -count 1 -timeout 30m ./...

## fuzz: explore every fuzz target for FUZZTIME each; commit what it finds under testdata/fuzz
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseManifest$$' -fuzztime $(FUZZTIME) ./pkg/apis/v1alpha1
	$(GO) test -run '^$$' -fuzz '^FuzzReplaceStatus$$' -fuzztime $(FUZZTIME) ./pkg/spool
	$(GO) test -run '^$$' -fuzz '^FuzzSetSpecPaused$$' -fuzztime $(FUZZTIME) ./pkg/spool
	$(GO) test -run '^$$' -fuzz '^FuzzPlaceholderCheck$$' -fuzztime $(FUZZTIME) ./pkg/spool
	$(GO) test -run '^$$' -fuzz '^FuzzEmitScalars$$' -fuzztime $(FUZZTIME) ./pkg/spool
	$(GO) test -run '^$$' -fuzz '^FuzzUserContentShortcut$$' -fuzztime $(FUZZTIME) ./pkg/spool
	$(GO) test -run '^$$' -fuzz '^FuzzProgressReader$$' -fuzztime $(FUZZTIME) ./pkg/runner

## schemas: regenerate schemas/task.schema.json from the Go types
schemas:
	$(GO) run ./hack/schemagen > schemas/task.schema.json

## bench: the side-by-side benchmark against tsp, parallel and xargs (about 35 min on 2 cores; root)
bench: build
	bash bench/run.sh

## bench-kube: node agents on a real kube-apiserver: create->Running latency over 3 agents, 1,000 trivial tasks over 1 and 3 agents (about 2 min)
bench-kube: build
	assets=$(KUBE_ASSETS) && \
	LARDON3D_KUBE_ASSETS="$$assets" LARDON3D_BIN=$(BIN) PATH="$(BIN):$$PATH" $(GO) test -count=1 -run '^$$' -bench '^BenchmarkNodeAgents$$' -benchtime 1x -timeout 30m ./cmd/lardon3d-controller/

## colmap-demo: a real COLMAP reconstruction through the controller
colmap-demo: build
	bash examples/colmap/demo.sh

clean:
	rm -rf $(BIN)
