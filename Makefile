# policyd — `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --warn-undefined-variables --no-builtin-rules
.DELETE_ON_ERROR:

# Pinned tool versions, installed from source into .bin (never from a global bin dir).
# PROMTOOL_VERSION is the Go module version of a Prometheus release (v0.316.0: Prometheus 3.16).
BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GOLANGCI_LINT_VERSION      := v2.6.2
GRPCURL_VERSION            := v1.9.4
PROMTOOL_VERSION           := v0.316.0

BIN     := $(CURDIR)/.bin
STAMPS  := $(BIN)/.stamps
export PATH := $(BIN):$(PATH)
export GOBIN := $(BIN)

VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LISTEN   ?= 127.0.0.1:7433
FUZZTIME ?= 5s

# The private PostgreSQL clusters (scripts/pg.sh): `make run` keeps its journal in PG_DIR between
# runs; `make test` makes a throwaway one in TEST_PG_DIR and removes it afterwards.
PG_DIR       ?= $(CURDIR)/.run/pg
PG_PORT      ?= 54320
TEST_PG_DIR  ?= $(CURDIR)/.run/pg-test
TEST_PG_PORT ?= 54329
BENCH_PG_DIR  ?= $(CURDIR)/.run/pg-bench
BENCH_PG_PORT ?= 54330
BENCH_GROWTH_SIZES ?= 0,1000000,10000000
SIM_PG_DIR    ?= $(CURDIR)/.run/pg-sim
SIM_PG_PORT   ?= 54332
SOAK_PG_DIR   ?= $(CURDIR)/.run/pg-soak
SOAK_PG_PORT  ?= 54331
SOAK_SECONDS     ?= 60
SOAK_CONCURRENCY ?= 50
GO_TEST_FLAGS ?= -race -shuffle=on -count=1

# The module's packages: not the Go sources some npm packages ship under
# clients/typescript/node_modules, which `./...` would include.
GO_PACKAGES = $(shell go list ./... | grep -v /node_modules/)
GO_DIRS = $(shell go list -f '{{.Dir}}' ./... | grep -v /node_modules/ | sed 's|^$(CURDIR)|.|')

# Every folder `make generate` writes, checked current by `make test`.
GENERATED := gen clients/go/internal/gen clients/python/src/policyd_client/_gen clients/typescript/src/gen

# Every fuzz target, as package:FuzzName; `make fuzz` runs each for FUZZTIME.
FUZZ_TARGETS := \
	./internal/classifier:FuzzClassify \
	./internal/classifier:FuzzDelayHints \
	./internal/classifier:FuzzScanJSONKeys \
	./internal/classifier:FuzzParseRuleSet \
	./internal/auth:FuzzParseTokens \
	./internal/policy:FuzzParse \
	./internal/journal:FuzzDecodePageToken \
	./internal/journal:FuzzDecodeIncidentToken \
	./internal/cases:FuzzParse \
	./internal/server:FuzzValidateClassifyRequest \
	./internal/server:FuzzValidateNextDelayRequest \
	./internal/server:FuzzUTF8Codec \
	./internal/server:FuzzCoordinateReport \
	./internal/fleet:FuzzReadLimits

##@ Everyday

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

.PHONY: run
run: build $(STAMPS)/grpcurl-$(GRPCURL_VERSION) ## Serve policyd on LISTEN with a journal: DATABASE_URL, else a private cluster in .run/pg.
	@url="$${DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(scripts/pg.sh start $(PG_DIR) $(PG_PORT)); fi; \
	echo; \
	echo "policyd: serving on $(LISTEN), journal in $$url"; \
	echo "  gRPC:   $(BIN)/grpcurl -plaintext $(LISTEN) list"; \
	echo "  SQL:    psql '$$url' -c 'SELECT * FROM journal_failed_contexts'"; \
	echo "  demo:   scripts/failing-run.sh $(LISTEN) '$$url'"; \
	echo "          (a failed run, its error report, the views)"; \
	echo "  stop:   Ctrl-C, then 'make stop' to stop the private PostgreSQL"; \
	echo; \
	exec ./bin/policyd serve --listen $(LISTEN) --database-url "$$url"

.PHONY: stop
stop: ## Stop the private PostgreSQL cluster that `make run` started.
	scripts/pg.sh stop $(PG_DIR) $(PG_PORT)

.PHONY: test
test: ## Everything: generated code current, lint, tests with -race (PostgreSQL included), short fuzz runs.
	@if [ -n "$${TEST_DATABASE_URL:-}" ]; then \
		$(MAKE) --no-print-directory test-all; \
	else \
		rm -rf $(TEST_PG_DIR); \
		trap 'scripts/pg.sh stop $(TEST_PG_DIR) $(TEST_PG_PORT) || true; rm -rf $(TEST_PG_DIR)' EXIT; \
		url=$$(scripts/pg.sh start $(TEST_PG_DIR) $(TEST_PG_PORT)); \
		TEST_DATABASE_URL=$$url $(MAKE) --no-print-directory test-all; \
	fi

.PHONY: test-all
test-all: check-generate lint deploy-check go-test sim-goals conformance clients-test fuzz-short # `make test` with TEST_DATABASE_URL set.

##@ Parts of `make test`

.PHONY: go-test
go-test: build $(STAMPS)/grpcurl-$(GRPCURL_VERSION) $(STAMPS)/chromium ## Run the Go tests with -race (TEST_DATABASE_URL, else private clusters).
	go test $(GO_TEST_FLAGS) $(GO_PACKAGES)

.PHONY: sim-goals
sim-goals: ## The fleet simulation's goals at full strength (seeds 1–20, 2,000 agents), without -race (a simulation runs in one goroutine): go-test's race run keeps the replicas over PostgreSQL.
	go test -count=1 ./internal/fleetsim

.PHONY: conformance
conformance: build ## Replay the peers' retry tests and the real-failure corpus; print agreement per peer and provider.
	./bin/policyd check-rules --policy conformance/profiles.yaml --cases conformance/peers --cases conformance/corpus --agreement

.PHONY: deploy-check
deploy-check: $(STAMPS)/promtool-$(PROMTOOL_VERSION) ## Check deploy/'s Prometheus alert rules and run their unit tests with promtool.
	cd deploy/prometheus && promtool check rules policyd-alerts.yml && promtool test rules policyd-alerts.test.yml

.PHONY: clients-test
clients-test: build ## Run the clients' suites (clients/<lang>/scripts/test.sh) against real policyd processes, a database each: Go, then Python and TypeScript side by side.
	scripts/clients-test.sh

# A count, not a duration: Go 1.26's fuzzing coordinator can fail a target
# with a bare "context deadline exceeded" when a duration runs out while a
# worker is mid-input on a busy machine (go.dev/issue/75804, fixed in Go
# 1.27); a count has no deadline to race.
# The same for minimizing: a short run does not spend the default minute
# minimizing each new input it finds (FuzzParse stood still 45 s of a 50 s
# run doing so); a long run (make fuzz) keeps Go's default.
.PHONY: fuzz-short
fuzz-short: FUZZTIME := 10000x
fuzz-short: FUZZMINIMIZETIME := 1000x
fuzz-short: fuzz ## Run every fuzz target briefly (10,000 inputs each).

FUZZMINIMIZETIME ?= 60s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (e.g. make fuzz FUZZTIME=10m).
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg; \
	done
	@echo "fuzz clients/go FuzzRetryAfter for $(FUZZTIME)"
	cd clients/go && go test -run '^$$' -fuzz '^FuzzRetryAfter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) .

.PHONY: lint
lint: $(STAMPS)/buf-$(BUF_VERSION) $(STAMPS)/golangci-lint-$(GOLANGCI_LINT_VERSION) ## buf lint and format, gofmt, go vet, golangci-lint (.golangci.yml), go mod tidy.
	buf lint
	buf format --diff --exit-code
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' | grep -v '^gen/')); \
		if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet $(GO_PACKAGES)
	golangci-lint run $(GO_DIRS)
	go mod tidy -diff
	cd clients/go && go vet ./... && golangci-lint run -c ../../.golangci.yml ./... && go mod tidy -diff
	cd clients/go/sdktest && go vet ./... && golangci-lint run -c ../../../.golangci.yml ./... && go mod tidy -diff

.PHONY: generate
generate: $(STAMPS)/buf-$(BUF_VERSION) $(STAMPS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION) $(STAMPS)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION) ## Generate code from proto/: gen/ and each client's stubs.
	buf generate
	clients/python/scripts/generate.sh
	clients/typescript/scripts/generate.sh

.PHONY: check-generate
check-generate: generate ## Fail if the generated code differs from what `make generate` produces.
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated code is not current: run 'make generate' and commit the result:"; \
		git status --porcelain -- $(GENERATED); git --no-pager diff --stat -- $(GENERATED); exit 1; fi

.PHONY: breaking
breaking: $(STAMPS)/buf-$(BUF_VERSION) ## Check proto changes against main for WIRE_JSON breakage.
	buf breaking --against '.git#branch=main'

##@ Build and measure

.PHONY: build
build: ## Build bin/policyd (and bin/policyd-fakeprovider, the fake LLM provider the clients' real-SDK tests call).
	go build -ldflags "-X main.version=$(VERSION)" -o bin/policyd ./cmd/policyd
	go build -o bin/policyd-fakeprovider ./cmd/policyd-fakeprovider

# database_or_throwaway_pg,DIR,PORT: shell that sets $$url to DATABASE_URL, else starts a throwaway
# cluster in DIR on PORT, stopped and removed when the recipe's shell exits.
database_or_throwaway_pg = url="$${DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then \
		trap 'scripts/pg.sh stop $(1) $(2) || true; rm -rf $(1)' EXIT; \
		rm -rf $(1); url=$$(scripts/pg.sh start $(1) $(2)); \
	fi

.PHONY: bench
bench: build ## policyd against a bare gRPC echo, journaled against plain, in one run (BENCH_SECONDS per scenario, default 12), and each client's transport against its bare one; writes docs/benchmarks.md.
	go build -o bin/policyd-bench ./cmd/policyd-bench
	@$(call database_or_throwaway_pg,$(BENCH_PG_DIR),$(BENCH_PG_PORT)); \
	./bin/policyd-bench --policyd bin/policyd --database-url "$$url" --doc docs/benchmarks.md
	scripts/bench-transports.sh docs/benchmarks.md

.PHONY: soak
soak: build ## Mixed RPCs from SOAK_CONCURRENCY (50) clients for SOAK_SECONDS (60) against policyd and PostgreSQL; fails on any error or RSS growth.
	go build -o bin/policyd-bench ./cmd/policyd-bench
	@$(call database_or_throwaway_pg,$(SOAK_PG_DIR),$(SOAK_PG_PORT)); \
	./bin/policyd-bench --soak --policyd bin/policyd --database-url "$$url" --seconds $(SOAK_SECONDS) --concurrency $(SOAK_CONCURRENCY)

.PHONY: bench-growth
bench-growth: build ## The journal's cost as it grows: empty, 1 M, 10 M attempt rows (takes several minutes).
	go build -o bin/policyd-bench ./cmd/policyd-bench
	@trap 'scripts/pg.sh stop $(BENCH_PG_DIR) $(BENCH_PG_PORT) || true; rm -rf $(BENCH_PG_DIR)' EXIT; \
	rm -rf $(BENCH_PG_DIR); url=$$(scripts/pg.sh start $(BENCH_PG_DIR) $(BENCH_PG_PORT)); \
	./bin/policyd-bench --policyd bin/policyd --database-url "$$url" --doc docs/benchmarks.md --growth $(BENCH_GROWTH_SIZES)

.PHONY: simulate
simulate: ## The fleet simulation: every scenario, lifetime and policy, one line each, and 3 replicas over PostgreSQL (DATABASE_URL, else a throwaway cluster); redraws docs/fleet/*.svg and the table in docs/fleet-simulation.md.
	go build -o bin/policyd-sim ./cmd/policyd-sim
	@$(call database_or_throwaway_pg,$(SIM_PG_DIR),$(SIM_PG_PORT)); \
	./bin/policyd-sim -svg-dir docs/fleet -doc docs/fleet-simulation.md -replicas 1,3 -database-url "$$url"

.PHONY: tools
tools: $(STAMPS)/buf-$(BUF_VERSION) $(STAMPS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION) $(STAMPS)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION) $(STAMPS)/golangci-lint-$(GOLANGCI_LINT_VERSION) $(STAMPS)/grpcurl-$(GRPCURL_VERSION) $(STAMPS)/promtool-$(PROMTOOL_VERSION) $(STAMPS)/chromium ## Install the pinned tools into .bin (and Chromium, with apt-get, where missing).

.PHONY: clean
clean: ## Remove build output (keeps .bin tools).
	rm -rf bin

# A stamp per tool version: changing a version above reinstalls that tool.
$(STAMPS)/buf-$(BUF_VERSION):
	go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@mkdir -p $(STAMPS) && touch $@
$(STAMPS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION):
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@mkdir -p $(STAMPS) && touch $@
$(STAMPS)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION):
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@mkdir -p $(STAMPS) && touch $@
$(STAMPS)/golangci-lint-$(GOLANGCI_LINT_VERSION):
	go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mkdir -p $(STAMPS) && touch $@
$(STAMPS)/grpcurl-$(GRPCURL_VERSION):
	go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	@mkdir -p $(STAMPS) && touch $@
$(STAMPS)/promtool-$(PROMTOOL_VERSION):
	go install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)
	@mkdir -p $(STAMPS) && touch $@
# Headless Chromium for the status page's browser test: Debian's package,
# installed with apt-get only where no Chromium is found.
$(STAMPS)/chromium:
	scripts/chromium.sh >/dev/null
	@mkdir -p $(STAMPS) && touch $@
