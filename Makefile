# metaplane build targets. `make run` and `make test` are the two commands a
# new user needs (see README.md).

GO        ?= go
BIN       := $(CURDIR)/bin
PKGS      := ./...
TEST_TIMEOUT ?= 15m
export METAPLANE_BIN_DIR := $(BIN)

.PHONY: all build test test-short run demo lint vet proto proto-check soak stress faults bench deps-test clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...
	@# Each plugins/<name>/main.go is the binary metaplane-backend-<name>.
	@for m in plugins/*/main.go; do n=$$(basename $$(dirname $$m)); \
		echo "$(GO) build -o $(BIN)/metaplane-backend-$$n ./plugins/$$n"; \
		$(GO) build -o $(BIN)/metaplane-backend-$$n ./plugins/$$n || exit 1; done

# deps-test installs what the tests start for real (a ZooKeeper server from
# Debian's package) when it is missing.
deps-test:
	@./scripts/ensure-test-deps.sh

test: build deps-test
	$(GO) vet $(PKGS)
	$(GO) test -timeout $(TEST_TIMEOUT) $(PKGS)

test-short: build
	$(GO) test -short -timeout $(TEST_TIMEOUT) $(PKGS)

run: build
	$(BIN)/metaplane coordinator

demo: build
	$(BIN)/metaplane demo

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# soak runs the long chaos and soak tests, kept out of `make test`.
soak: build deps-test
	METAPLANE_SOAK=1 $(GO) test -timeout 60m -run 'Soak|Chaos' $(PKGS)

# stress runs the timing-sensitive packages (Raft, ZooKeeper, plugins,
# coordinator) COUNT times (default 10) beside CPU hogs, then the Raft and
# plugin packages again under -race (RACE=0 skips that pass), to find flaky
# tests. Hours, not minutes: kept out of `make test`.
stress: build deps-test
	./scripts/stress.sh

# faults runs every network fault of internal/netfault (drop, refuse, one
# way and both, leader isolation, bridge, flap) on both backends, each on a
# fresh cluster in network namespaces, under a checked history (on
# ZooKeeper: coordinators cut from the ensemble with the FIP-9 fencing
# check, the ZooKeeper leader cut from the other servers). SEED
# repeats a run; HOLD is how long each fault holds; FAULTS_TIMEOUT bounds
# the whole run. Needs root and iptables. Kept out of `make test`, which
# runs one short scenario per backend.
SEED           ?=
HOLD           ?= 5s
FAULTS_TIMEOUT ?= 30m
faults: build deps-test
	METAPLANE_FAULTS=1 METAPLANE_FAULTS_SEED=$(SEED) METAPLANE_FAULTS_HOLD=$(HOLD) \
		$(GO) test -count=1 -p 1 -timeout $(FAULTS_TIMEOUT) -v -run 'Faults' ./internal/netfault/

bench: build deps-test
	$(BIN)/metaplane bench

clean:
	rm -rf $(BIN)

# proto regenerates the Go code of every .proto under proto/ (installing the
# pinned generators when missing); proto-check fails when it is stale.
proto:
	./scripts/proto.sh

proto-check:
	./scripts/proto.sh --check
