# kha-supervisor. `make test` is what CI runs; `make demo` runs the lab.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
export CGO_ENABLED := 0

.PHONY: all build deps test vet clean

all: build

deps:
	./scripts/deps.sh

build:
	mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/kha-supervisor ./cmd/kha-supervisor

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

# Unit and integration tests. Integration tests need root, nspawn and etcd;
# under CI=true they fail instead of skipping when something is missing.
test: deps build vet
	$(GO) test -count=1 -timeout 15m ./...

clean:
	rm -rf bin dist
