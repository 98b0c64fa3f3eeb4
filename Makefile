# policyd — `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --warn-undefined-variables --no-builtin-rules
.DELETE_ON_ERROR:

# Pinned tool versions, installed from source into .bin (never from a global bin dir).
BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION        := v0.8.2
GRPCURL_VERSION            := v1.9.4

BIN     := $(CURDIR)/.bin
STAMPS  := $(BIN)/.stamps
export PATH := $(BIN):$(PATH)
export GOBIN := $(BIN)

VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LISTEN   ?= 127.0.0.1:7433
FUZZTIME ?= 5s
GO_TEST_FLAGS ?= -race -shuffle=on -count=1

# Every fuzz target, as package:FuzzName; `make fuzz` runs each for FUZZTIME.
FUZZ_TARGETS := \
	./internal/classifier:FuzzClassify \
	./internal/classifier:FuzzDelayHints \
	./internal/classifier:FuzzScanJSONKeys \
	./internal/classifier:FuzzParseRuleSet

##@ Everyday

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

.PHONY: run
run: build $(STAMPS)/grpcurl-$(GRPCURL_VERSION) ## Build and serve policyd on LISTEN (default 127.0.0.1:7433).
	@echo "policyd: serving on $(LISTEN); try:"
	@echo "  $(BIN)/grpcurl -plaintext $(LISTEN) list"
	exec ./bin/policyd serve --listen $(LISTEN)

.PHONY: test
test: check-generate lint go-test fuzz-short ## Everything: generated code current, lint, tests with -race, short fuzz runs.

##@ Parts of `make test`

.PHONY: go-test
go-test: ## Run the Go tests with -race.
	go test $(GO_TEST_FLAGS) ./...

.PHONY: fuzz-short
fuzz-short: FUZZTIME := 5s
fuzz-short: fuzz ## Run every fuzz target briefly.

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (e.g. make fuzz FUZZTIME=10m).
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

.PHONY: lint
lint: $(STAMPS)/buf-$(BUF_VERSION) $(STAMPS)/staticcheck-$(STATICCHECK_VERSION) ## buf lint, gofmt, go vet, staticcheck, go mod tidy.
	buf lint
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' | grep -v '^gen/')); \
		if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	staticcheck ./...
	go mod tidy -diff

.PHONY: generate
generate: $(STAMPS)/buf-$(BUF_VERSION) $(STAMPS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION) $(STAMPS)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION) ## Generate code from proto/ into gen/.
	buf generate

.PHONY: check-generate
check-generate: generate ## Fail if gen/ differs from what `make generate` produces.
	@if [ -n "$$(git status --porcelain -- gen)" ]; then \
		echo "gen/ is not current: run 'make generate' and commit the result:"; \
		git status --porcelain -- gen; git --no-pager diff --stat -- gen; exit 1; fi

.PHONY: breaking
breaking: $(STAMPS)/buf-$(BUF_VERSION) ## Check proto changes against main for WIRE_JSON breakage.
	buf breaking --against '.git#branch=main'

##@ Build and measure

.PHONY: build
build: ## Build bin/policyd.
	go build -ldflags "-X main.version=$(VERSION)" -o bin/policyd ./cmd/policyd

.PHONY: bench
bench: ## Run the in-process Go benchmarks (classifier).
	go test -run '^$$' -bench . -benchmem -benchtime 2s ./internal/...

.PHONY: tools
tools: $(STAMPS)/buf-$(BUF_VERSION) $(STAMPS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION) $(STAMPS)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION) $(STAMPS)/staticcheck-$(STATICCHECK_VERSION) $(STAMPS)/grpcurl-$(GRPCURL_VERSION) ## Install the pinned tools into .bin.

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
$(STAMPS)/staticcheck-$(STATICCHECK_VERSION):
	go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@mkdir -p $(STAMPS) && touch $@
$(STAMPS)/grpcurl-$(GRPCURL_VERSION):
	go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	@mkdir -p $(STAMPS) && touch $@
