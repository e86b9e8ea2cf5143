# `make test` is the one test command: formatting, vet, generated code, unit
# and in-process tests (with the race detector), then e2e tests against the
# real binaries. CI runs exactly this (see .ci/run).

GO        ?= go
BUF       := tools/buf/node_modules/.bin/buf
GOFILES    = $(shell git ls-files '*.go' | grep -v -e '\.pb\.go$$' -e '\.connect\.go$$')
UNIT_PKGS  = $(shell $(GO) list ./... | grep -v -e '/e2e')

.PHONY: test check fmt vet proto proto-check unit e2e bench build

test: check unit e2e

check: fmt vet proto-check

fmt:
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

$(BUF): tools/buf/package.json tools/buf/package-lock.json
	npm ci --prefix tools/buf --no-audit --no-fund
	@touch $(BUF)

# proto regenerates the Go code from proto/ with local plugins only.
proto: $(BUF)
	$(BUF) lint
	$(BUF) generate

# proto-check fails when the committed generated code is stale.
proto-check: proto
	@git diff --exit-code -- proto/ || (echo "generated code is stale: run 'make proto' and commit" && exit 1)
	@test -z "$$(git status --porcelain -- proto/)" || (git status --porcelain -- proto/ && echo "untracked generated files: run 'make proto' and commit" && exit 1)

unit:
	$(GO) test -race -count=1 -timeout 15m $(UNIT_PKGS)

e2e:
	$(GO) test -count=1 -timeout 30m ./e2e/...

build:
	$(GO) build -o bin/ ./cmd/...

bench:
	$(GO) run ./e2e/bench ingest
	$(GO) run ./e2e/bench deliver
