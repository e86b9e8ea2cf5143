# `make test` is the one test command: formatting, vet, generated code, unit
# and in-process tests (with the race detector), then e2e tests against the
# real binaries. CI runs exactly this (see .ci/run).

GO        ?= go
BUF       := tools/buf/node_modules/.bin/buf
GOFILES    = $(shell git ls-files '*.go' | grep -v -e '\.pb\.go$$' -e '\.connect\.go$$')
UNIT_PKGS  = $(shell $(GO) list ./... | grep -v -e '/e2e')

.PHONY: test check fmt vet lint links proto proto-check unit fuzz e2e sdk-ts servers bench build

test: check unit fuzz e2e sdk-ts console-test

check: fmt vet lint links proto-check console-check

fmt:
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# links fails when a relative link in the README or docs/ does not resolve
# (a missing file, or an anchor no heading of the target has); external
# links are not fetched.
links:
	$(GO) run ./tools/linkcheck README.md docs

# lint runs staticcheck (pinned as a tool in go.mod) with its default checks.
lint:
	$(GO) tool staticcheck ./...

$(BUF): tools/buf/package.json tools/buf/package-lock.json
	npm ci --prefix tools/buf --no-audit --no-fund
	@touch $(BUF)

# proto regenerates the Go code in proto/ and the TypeScript SDK's in
# sdk/typescript/src/gen from proto/, with local plugins only.
PROTO_OUT := proto/ sdk/typescript/src/gen/
proto: $(BUF)
	$(BUF) lint
	$(BUF) generate

# proto-check fails when the committed generated code is stale.
proto-check: proto
	@git diff --exit-code -- $(PROTO_OUT) || (echo "generated code is stale: run 'make proto' and commit" && exit 1)
	@test -z "$$(git status --porcelain -- $(PROTO_OUT))" || (git status --porcelain -- $(PROTO_OUT) && echo "untracked generated files: run 'make proto' and commit" && exit 1)

# sdk-ts installs, builds and tests the TypeScript SDK (sdk/typescript):
# unit tests, standardwebhooks cross-checks, and integration tests against
# a real `rivora dev` that the tests build from ./cmd/rivora.
sdk-ts:
	cd sdk/typescript && npm ci --no-audit --no-fund && npm run build && npm test

unit:
	$(GO) test -race -count=1 -timeout 15m $(UNIT_PKGS)

# fuzz runs every Go fuzz target for FUZZTIME each, on top of its
# committed corpus (`unit` already replays that corpus once): see
# tools/fuzz/run.sh, which also tells Go 1.26's end-of-fuzztime race
# (golang/go#75804) from a failing input.
FUZZTIME ?= 10s

fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) tools/fuzz/run.sh

# Real servers the e2e tests start: MinIO and Consul (v1.14.11, the last
# open-source line, pinned in the nested module tools/consul) are built from
# their Go modules (no download sites here); the first builds take 5–20
# minutes each on 2 cores, then they are cached in GOPATH/bin. The e2e
# tests build them the same way when run directly.
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
GOBIN_DIR      = $(shell $(GO) env GOPATH)/bin

servers:
	@if command -v minio >/dev/null 2>&1 || [ -x "$(GOBIN_DIR)/minio" ]; then echo "minio: present"; else \
		echo "minio: building github.com/minio/minio@$(MINIO_VERSION) (first time only)"; \
		tmp=$$(mktemp -d) && cd $$tmp && GOBIN="$(GOBIN_DIR)" GOFLAGS=-mod=mod $(GO) install github.com/minio/minio@$(MINIO_VERSION); \
	fi
	@if [ -x "$(GOBIN_DIR)/consul" ] && "$(GOBIN_DIR)/consul" version | grep -q 'Consul v1.14.11'; then echo "consul: present"; else \
		echo "consul: building v1.14.11 from tools/consul (first time only, 10-20 minutes)"; \
		cd tools/consul && $(GO) build -o "$(GOBIN_DIR)/consul" github.com/hashicorp/consul; \
	fi

e2e: servers
	$(GO) test -count=1 -timeout 55m ./e2e/...

build:
	$(GO) build -o bin/ ./cmd/...

bench:
	$(GO) run ./e2e/bench ingest
	$(GO) run ./e2e/bench deliver
	$(GO) run ./e2e/bench gameday
	$(GO) run ./e2e/bench gameday -scenario hard-down

.PHONY: console console-check console-test

# console builds the admin console (console/src) into console/dist, which
# is committed and embedded by the console Go package.
console:
	cd console && npm ci --no-audit --no-fund && npm run build

# console-check fails when the committed console/dist is stale.
console-check: console
	@git diff --exit-code -- console/dist || (echo "console/dist is stale: run 'make console' and commit" && exit 1)
	@test -z "$$(git status --porcelain -- console/dist)" || (git status --porcelain -- console/dist && echo "untracked console/dist files: run 'make console' and commit" && exit 1)

# console-test runs the console's unit tests, then its browser tests in
# Debian's chromium against a real `rivora dev` (installed if missing).
# The browser tests embed console/dist in the rivora they build, so dist is
# rebuilt first.
console-test: console
	cd console && npm test
	console/scripts/ensure-chromium.sh
	cd console && npm run test:browser
