# onejob — the two commands that matter are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
NPM ?= npm
export GOFLAGS ?= -mod=readonly

.PHONY: all run test tools vet lint unit

all: test

# node_modules is rebuilt from the committed lock whenever the lock changes.
node_modules/.package-lock.json: package.json package-lock.json
	$(NPM) ci --no-audit --no-fund --loglevel=error

tools: node_modules/.package-lock.json

vet:
	$(GO) vet ./...

unit: tools
	$(GO) test -race -count=1 ./...

test: tools vet unit
