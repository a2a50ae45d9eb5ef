# dlb — build, test, benchmark and demo targets. See README.md.

GO       ?= go
BIN      ?= bin
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
GENERATED := pkg/datapath/dispatcher_bpfel.go pkg/datapath/dispatcher_bpfel.o \
             pkg/datapath/bench_bpfel_test.go pkg/datapath/bench_bpfel_test.o

.PHONY: all build deps test-deps generate check-generated lint test test-unit fuzz bench demo clean

all: build

## build: dlbd, dlbctl and the lab tools into ./bin (needs no clang: the BPF object is committed)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/dlbd ./cmd/dlbctl ./scripts/labhttpd ./scripts/labclient ./scripts/labxdp ./scripts/labflood ./scripts/labicmp

## deps: install what the lab and demo use (iproute2, util-linux, ethtool) if missing
deps:
	@bash scripts/deps.sh lab

## test-deps: deps, plus the real servers the advisor tests probe
test-deps:
	@bash scripts/deps.sh test

## generate: rebuild the BPF objects and their Go bindings with clang-19
generate:
	$(GO) generate ./pkg/datapath/

## check-generated: fail if the committed BPF objects differ from a fresh build
check-generated:
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	for f in $(GENERATED); do [ -f $$f ] && cp $$f $$tmp/$$(basename $$f); done; \
	$(GO) generate ./pkg/datapath/ || exit 1; \
	drift=0; for f in $(GENERATED); do \
	  [ -f $$f ] || continue; \
	  if ! cmp -s $$f $$tmp/$$(basename $$f); then echo "generated file drifted: $$f"; drift=1; fi; \
	done; \
	if [ $$drift = 1 ]; then \
	  for f in $(GENERATED); do [ -f $$tmp/$$(basename $$f) ] && cp $$tmp/$$(basename $$f) $$f; done; \
	  echo "the committed BPF objects are stale: run 'make generate' and commit the result"; exit 1; \
	fi; echo "generated files are up to date"

## lint: gofmt and go vet
lint:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) vet ./...

## test: everything — unit, data-path (BPF_PROG_TEST_RUN) and end-to-end lab tests.
## Privileged tests skip when not root; DLB_REQUIRE_PRIVILEGED=1 makes that a failure.
test: test-deps lint build
	$(GO) test -count=1 -timeout 14m ./...
	$(MAKE) fuzz

## fuzz: the executor's fuzz target, coverage-guided (needs root; skips without
## it); FUZZTIME=10m make fuzz for a long run (new failing inputs land in
## pkg/datapath/testdata/fuzz)
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzExecutor$$' -fuzztime $(FUZZTIME) ./pkg/datapath/

## test-unit: only what needs no root
test-unit:
	$(GO) test -count=1 -short ./...

## bench: per-packet cost of the executor, as ratios to its own established flow and to a
## reference program, and live-frame throughput through a veth pair (needs root);
## then the control plane: a manager cycle over 10,000 servers and Maglev rebuilds
bench:
	DLB_BENCH=1 $(GO) test -run '^TestBenchReport$$' -count=1 -v ./pkg/datapath/
	$(GO) test -run '^$$' -bench 'Compute10000' -benchtime 50x ./manager/
	$(GO) test -run '^$$' -bench 'ManagerCycle' -benchtime 5x ./pkg/dispatcher/
	$(GO) test -run '^$$' -bench 'Build' -benchtime 20x ./pkg/maglev/

## demo: a real lab (namespaces, dlbd, dlbctl, HTTP backends) with traffic through the VIP (needs root)
demo: deps build
	bash scripts/demo.sh

clean:
	rm -rf $(BIN)
