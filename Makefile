# dlb — build, test, benchmark and demo targets. See README.md.

GO       ?= go
BIN      ?= bin
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
# One build configuration for every build and test and for the package: static
# (no cgo) and without this machine's paths. The package is built that way, and
# "make test" builds it (TestPrivilegedPackage): with one configuration it
# finds everything compiled already instead of compiling it all again (131 s
# -> 45 s after "make build" on a cold cache).
export CGO_ENABLED := 0
export GOFLAGS := -trimpath $(filter-out -trimpath,$(GOFLAGS))
GENERATED := pkg/datapath/dispatcher_bpfel.go pkg/datapath/dispatcher_bpfel.o \
             pkg/datapath/bench_bpfel_test.go pkg/datapath/bench_bpfel_test.o

.PHONY: all build deps test-deps generate check-generated lint test test-kernels test-unit fuzz fuzz-inputs soak soak-ha bench demo package clean

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

## lint: gofmt, golangci-lint (go vet's analyzers; depguard enforces the layering of
## DESIGN.md: see .golangci.yml) and a cross-build for darwin of what must
## stay portable (dlbctl, the manager, the advisors, the configuration)
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
$(GOLANGCI_LINT):
	@mkdir -p $(BIN)/.golangci
	GOBIN=$(abspath $(BIN))/.golangci $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/.golangci/golangci-lint $@

# golangci-lint's govet runs go vet's analyzers (the list of Go 1.26's cmd/vet),
# so "go vet" is not run again (it compiled every test dependency once more).
lint: $(GOLANGCI_LINT)
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GOLANGCI_LINT) run ./...
	GOOS=darwin GOARCH=arm64 $(GO) build ./cmd/dlbctl ./manager ./advisors ./pkg/config

## test: everything — unit, data-path (BPF_PROG_TEST_RUN) and end-to-end lab tests.
## Privileged tests skip when not root; DLB_REQUIRE_PRIVILEGED=1 makes that a failure.
## On a fresh machine the linter's build (about 3 minutes on 2 cores) runs
## beside the test packages' installation (mostly downloads and unpacking).
## The lab tests that measure timings under load or load the machine (alone(t)
## in pkg/e2e) run first with nothing beside them (DLB_E2E_PHASE=alone); then
## every other package's tests run beside the lab tests that mostly wait
## (DLB_E2E_PHASE=shared). Both phases run even when the first failed. The
## executor's fuzzing runs beside the shared phase at the lowest CPU priority:
## its instrumented build (about a minute of CPU on a fresh machine) takes what
## the lab tests leave idle; its output follows the phase's.
test:
	$(MAKE) -j2 --output-sync=target test-deps $(GOLANGCI_LINT)
	$(MAKE) lint build
	rc=0; DLB_E2E_PHASE=alone $(GO) test -count=1 -timeout 20m ./pkg/e2e/ || rc=1; \
	log=$$(mktemp); nice -n 19 $(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME) >$$log 2>&1 & fuzz=$$!; \
	DLB_E2E_PHASE=shared $(GO) test -count=1 -timeout 20m ./... || rc=1; \
	wait $$fuzz || { rc=1; echo "make fuzz failed:"; }; cat $$log; rm -f $$log; exit $$rc

## fuzz: the executor's fuzz target, coverage-guided (needs root; skips without
## it); FUZZTIME=10m make fuzz for a long run (new failing inputs land in
## pkg/datapath/testdata/fuzz)
FUZZTIME ?= 20s
# make test's share of it: the 15-minute bound of make test leaves about 10 s,
# given as a number of runs (7 to 10 s here), not a duration: Go 1.26's fuzzing
# coordinator can report its own -fuzztime deadline as the target's failure
# ("context deadline exceeded", no failing input; go.dev/issue/75804, fixed in
# Go 1.27), and a count sets no deadline.
TEST_FUZZTIME ?= 40000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzExecutor$$' -fuzztime $(FUZZTIME) ./pkg/datapath/

## fuzz-inputs: the decoders of what reaches dlb from outside, each for FUZZTIME: heartbeats,
## replication frames and records (pkg/ha), metric agents' reports, exporters' scrapes and
## Prometheus queries (pkg/metricserver), the configuration file and operations as dlbctl and
## the API send them (pkg/config), servers' replies to the advisors (advisors); make test runs
## their seed inputs only. New failing inputs land in each package's testdata/fuzz.
fuzz-inputs:
	$(GO) test -run '^$$' -fuzz '^FuzzAdvisorReplies$$' -fuzztime $(FUZZTIME) ./advisors/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./pkg/ha/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeData$$' -fuzztime $(FUZZTIME) ./pkg/ha/
	$(GO) test -run '^$$' -fuzz '^FuzzReadFrame$$' -fuzztime $(FUZZTIME) ./pkg/ha/
	$(GO) test -run '^$$' -fuzz '^FuzzParseReport$$' -fuzztime $(FUZZTIME) ./pkg/metricserver/
	$(GO) test -run '^$$' -fuzz '^FuzzPromScrapes$$' -fuzztime $(FUZZTIME) ./pkg/metricserver/
	$(GO) test -run '^$$' -fuzz '^FuzzParsePromQuery$$' -fuzztime $(FUZZTIME) ./pkg/metricserver/
	$(GO) test -run '^$$' -fuzz '^FuzzReadFile$$' -fuzztime $(FUZZTIME) ./pkg/config/
	$(GO) test -run '^$$' -fuzz '^FuzzEditorOps$$' -fuzztime $(FUZZTIME) ./pkg/config/

## soak: the chaos soak at length (needs root): 3 minutes of random faults (dlbd killed, interface
## down/up, backends restarted or given a new MAC, config churn, a second dlbd, the socket deleted)
## under continuous traffic, with a table per fault; make test runs about 50 s (every fault once).
## SOAK=10m for longer, SEED=N to replay a run.
SOAK ?= 3m
soak:
	DLB_REQUIRE_PRIVILEGED=1 DLB_SOAK_DURATION=$(SOAK) $(if $(SEED),DLB_SOAK_SEED=$(SEED)) \
	  $(GO) test -count=1 -v -timeout 60m -run '^TestPrivilegedE2EChaosSoak$$' ./pkg/e2e/

## soak-ha: only the high-availability faults, each in MAC and NAT mode (make test runs most of
## them too), dlbd frozen and resumed among them, then the standby upgraded across an executor
## ABI change before a takeover, about 4 min; DLB_HA_ONLY=regexp picks cases by "mode/fault"
soak-ha:
	DLB_REQUIRE_PRIVILEGED=1 DLB_HA_ALL_MODES=1 $(GO) test -count=1 -v -timeout 30m -run '^TestPrivilegedHA(Failover|UpgradeAcrossABI)$$' ./pkg/e2e/

## test-kernels: the data-path tests under Debian 12's own kernels (its default 6.1, and 6.12),
## each booted in qemu without KVM, to check which releases' verifiers accept the executor
## (needs root; installs qemu-system-x86, busybox-static, cpio and the lab's tools; 4-6 minutes)
test-kernels:
	bash scripts/kernels.sh

## test-unit: only what needs no root
test-unit:
	$(GO) test -count=1 -short ./...

## bench: per-packet cost of the executor, as ratios to its own established flow and to a
## reference program, and live-frame throughput through a veth pair (needs root);
## then the control plane: manager cycles, loads and changes at 100,000 servers, Maglev
## rebuilds, dlbd itself at 1,000 ports x 100 servers through dlbctl (pkg/e2e/scale_test.go)
## and a /metrics scrape at that size (needs root: a lab); TestBenchReplication: the established flow
## and new connection with the active's replication scanner running beside them, as ratios to without;
## TestBenchChurn: a full connection table while connections come and go (misses reading two index lines)
bench:
	DLB_BENCH=1 $(GO) test -run '^TestBenchReport$$' -count=1 -v ./pkg/datapath/
	DLB_BENCH=1 $(GO) test -run '^TestBenchReplication$$' -count=1 -v ./pkg/datapath/
	DLB_BENCH_LOAD=- $(GO) test -run '^TestBench(Load|Restart)$$' -count=1 -v ./pkg/datapath/
	DLB_BENCH_CHURN=- $(GO) test -run '^TestBenchChurn$$' -count=1 -v ./pkg/datapath/
	DLB_BENCH=1 $(GO) test -run '^TestPrivilegedMetricsScaleReport$$' -count=1 -v ./pkg/e2e/
	$(GO) test -run '^$$' -bench 'Write100k' -benchtime 5x ./pkg/metrics/
	$(GO) test -run '^$$' -bench 'Compute10000' -benchtime 50x ./manager/
	$(GO) test -run '^$$' -bench 'ManagerCycle|Load100000|ChangeAt' -benchtime 5x ./pkg/dispatcher/
	$(GO) test -run '^$$' -bench 'FirstVerdictsAt100000' -benchtime 1x ./pkg/dispatcher/
	$(GO) test -run '^$$' -bench 'ProbedServers' -benchtime 1x ./pkg/dispatcher/health/
	DLB_BENCH=1 DLB_SCALE_DLBD_FLAGS="--max-servers 131071" $(GO) test -run '^TestPrivilegedScaleReport$$' -count=1 -v -timeout 20m ./pkg/e2e/
	$(GO) test -run '^$$' -bench 'Build' -benchtime 20x ./pkg/maglev/
	DLBH_CLIENTS=50 $(GO) test -run '^TestRequestMemory$$' -count=1 -v ./pkg/server/

## package: the Debian package bin/dlb_VERSION_ARCH.deb (dlbd, dlbctl, dlbmetricd,
## systemd units, man pages and completions generated from the commands; see packaging/)
NFPM      ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
PKG_BUILD := $(CURDIR)/.cache/package# packaging/nfpm.yaml names it
DEB_ARCH  ?= $(shell $(GO) env GOARCH)
DEB_VERSION ?= $(shell sh packaging/deb-version.sh $(VERSION))
package:
	rm -rf $(PKG_BUILD) && mkdir -p $(PKG_BUILD)/bin $(PKG_BUILD)/docs $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(PKG_BUILD)/bin/ ./cmd/dlbd ./cmd/dlbctl ./cmd/dlbmetricd
	for c in dlbd dlbctl dlbmetricd; do \
	  SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) \
	  $(GO) run -tags gendocs ./cmd/$$c __gendocs $(PKG_BUILD)/docs "dlb $(DEB_VERSION)" || exit 1; \
	done
	gzip -9n $(PKG_BUILD)/docs/man/*
	DEB_VERSION=$(DEB_VERSION) DEB_ARCH=$(DEB_ARCH) \
	  $(NFPM) package --config packaging/nfpm.yaml --packager deb --target $(BIN)/dlb_$(DEB_VERSION)_$(DEB_ARCH).deb

## demo: a real lab (namespaces, dlbd, dlbctl, HTTP backends) with traffic through the VIP (needs root);
## then three dispatchers behind a router doing ECMP (needs FRR or BIRD 2: make test-deps); then a
## primary and a backup dispatcher: the active killed under keep-alive load, the backup takes over
demo: deps build
	bash scripts/demo.sh
	bash scripts/demo-scaleout.sh
	bash scripts/demo-ha.sh

clean:
	rm -rf $(BIN)
