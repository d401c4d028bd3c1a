# holdfast — make help lists the targets.

SQLC_VERSION ?= v1.31.1
SQLC         := go run github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)
# The Go client generated from the OpenAPI document (internal/oapiclient, committed).
OAPI_CODEGEN_VERSION ?= v2.8.2
OAPI_CODEGEN := go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@$(OAPI_CODEGEN_VERSION) -generate types,client -package oapiclient
OAPI_CLIENT  := internal/oapiclient/client.gen.go
REDOCLY_VERSION ?= 2.77.0
SERVICES     := ./internal/services/services.sh
HA           := ./internal/services/ha.sh
# -timeout 30m as CI's (.ci/run): the engine package's tests, run one after another, take
# more than go test's default 10 minutes on a busy machine (make test-busy); a hang is
# the watchdog's to find (internal/testsvc/watchdog.go), not the package timeout's.
GOTEST_FLAGS ?= -race -count=1 -timeout 30m
BIN          := bin/holdfast

# with-services runs a command with DATABASE_URL and REDIS_URL exported: the caller's,
# or those of the PostgreSQL and Redis that services.sh starts for this checkout.
with-services = set -a; svc="$$($(SERVICES) start)" || exit 1; eval "$$svc"; set +a;

# make run and make demo share an operator token (show creation over HTTP), made once
# per checkout under .local/ (git-ignored) unless HOLDFAST_OPERATOR_TOKEN is set.
OPERATOR_TOKEN_FILE := .local/operator-token
with-operator-token = export HOLDFAST_OPERATOR_TOKEN="$${HOLDFAST_OPERATOR_TOKEN:-$$(test -s $(OPERATOR_TOKEN_FILE) || \
	{ mkdir -p .local && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' > $(OPERATOR_TOKEN_FILE); }; cat $(OPERATOR_TOKEN_FILE))}";

.DEFAULT_GOAL := help
.PHONY: static deb image check-deploy screenshots readme reset help services services-down stop generate verify test test-short test-busy test-cluster fuzz build run run-ha ha-down demo bench bench-quick abuse chaos

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST) | \
		sed -e 's/$$(SQLC_VERSION)/$(SQLC_VERSION)/' -e 's/$$(OAPI_CODEGEN_VERSION)/$(OAPI_CODEGEN_VERSION)/' -e 's/$$(REDOCLY_VERSION)/$(REDOCLY_VERSION)/'

services: ## Start PostgreSQL and Redis on loopback for this checkout (unless DATABASE_URL / REDIS_URL are set)
	@$(SERVICES) start

services-down: ## Stop the PostgreSQL and Redis that `make services` started
	@$(SERVICES) stop

stop: ha-down services-down ## Stop everything this checkout started in the background: make run-ha's set-up, then the PostgreSQL, Redis and Redis Cluster of make run, make services and make test-cluster

reset: ## Stop this checkout's PostgreSQL and Redis and delete their data: the next make run starts clean
	@$(SERVICES) reset

generate: ## Regenerate db/ from queries/ and migrations/ with sqlc $(SQLC_VERSION), and internal/oapiclient from httpapi/openapi.yaml with oapi-codegen $(OAPI_CODEGEN_VERSION)
	$(SQLC) generate
	$(OAPI_CODEGEN) -o $(OAPI_CLIENT) httpapi/openapi.yaml

.PHONY: lint-openapi
lint-openapi: ## Lint httpapi/openapi.yaml with Redocly CLI $(REDOCLY_VERSION) (npx; needs Node.js 20+): 0 errors, 0 warnings (waivers in .redocly.lint-ignore.yaml)
	npx --yes @redocly/cli@$(REDOCLY_VERSION) lint --format=stylish httpapi/openapi.yaml

verify: ## Fail on drift (sqlc diff and vet, go mod tidy, gofmt, go vet), on a tracked file over 1 MB or a committed binary, and on a function over 80 lines
	./internal/checks/tree.sh
	go run ./internal/checks/funclen engine httpapi cmd internal/bench
	$(SQLC) diff
	$(SQLC) vet
	@tmp="$$(mktemp)"; trap 'rm -f "$$tmp"' EXIT; $(OAPI_CODEGEN) -o "$$tmp" httpapi/openapi.yaml && \
	if ! diff -u $(OAPI_CLIENT) "$$tmp"; then echo "$(OAPI_CLIENT) is out of date with httpapi/openapi.yaml: make generate"; exit 1; fi
	go mod tidy -diff
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...

# go-test is go test with a line per test as it finishes (internal/testprogress), or go
# test itself when GOTEST_FLAGS has -v (CI reads go test's own output).
go-test = $(if $(filter -v -v=true,$(GOTEST_FLAGS)),go test,go run ./internal/testprogress) $(GOTEST_FLAGS)
with-test-services = $(with-services) \
	export TEST_DATABASE_URL="$${TEST_DATABASE_URL:-$$DATABASE_URL}" TEST_REDIS_URL="$${TEST_REDIS_URL:-$$REDIS_URL}";

test: ## Start the services (and install Chromium for the page test when root), then run every test with the race detector, a line per test
	@$(with-test-services) eval "$$($(SERVICES) browser)"; export HOLDFAST_CHROMIUM; \
	$(go-test) ./...

# The core properties, each a test that make test runs too (go vet is make verify's):
# one holder per seat, all or nothing, expiry, the fence against a paused owner, idempotent confirmation, one booking
# per hold, cancel keeps the fence, group commit decides each confirmation alone, bad
# input and backend failure change nothing, Redis forgetting, the SQL constraints, the
# seat map reading its own writes, the HTTP mapping, the README's program.
SHORT_TESTS := TestHoldOneSeatManyClients|TestHoldOverlappingSetsAllOrNothing|TestHoldExpiresThenAnotherHolderGetsLargerGeneration|\
	TestExpiredOwnerCannotTouchNewHold|TestConfirmBooksAndMarksSold|TestLateConfirm|TestPausedOwnerIsRefused|TestIdempotentConfirm|\
	TestConcurrentRetriesWithOneKeyBookOnce|TestCancelKeepsTheFence|TestSpentHoldNeverBooksAgain|TestReleaseConfirmAndHoldRace|\
	TestGroupCommitIsolatesEachConfirmation|TestBadInputChangesNothing|TestBackendsDownAreUnavailable|TestRedisLosesEverything|\
	TestCounterWentBackwards|TestSQLFenceTwoTransactions|TestSQLClaimIsUnique|TestSQLCancelledBookingKeepsItsFence|\
	TestSQLFenceUnderManyWriters|TestSeatMapReadsOwnWrites|TestHolderLimitCheckedByPostgres|\
	TestOneSeatManyClientsOverHTTP|TestProblemMapping|TestStrictJSON|TestQuickstart|TestREADMEShowsThisProgram
SHORT_PACKAGES := ./engine ./httpapi ./examples/quickstart

test-short: ## The core properties only (SHORT_TESTS, docs/TESTING.md), about 10 s once compiled; make test runs them and everything else
	@$(with-test-services) $(go-test) -vet=off -run '^($(subst $(eval) ,,$(SHORT_TESTS)))$$' $(SHORT_PACKAGES)

test-busy: ## make test with two CPU-bound processes beside it (stress-ng --cpu 2): no test may depend on an idle machine
	@$(SERVICES) stress 2 & pid=$$!; trap 'kill $$pid 2>/dev/null; pkill -P $$pid 2>/dev/null || true' EXIT; \
	$(MAKE) --no-print-directory test GOTEST_FLAGS="$(GOTEST_FLAGS)"

test-cluster: ## The engine, HTTP and command tests again, against a local three-master Redis Cluster
	@$(with-services) eval "$$($(SERVICES) cluster)"; \
	export TEST_DATABASE_URL="$${TEST_DATABASE_URL:-$$DATABASE_URL}" TEST_REDIS_URL="$${TEST_REDIS_URL:-$$REDIS_URL}" TEST_REDIS_CLUSTER_URL="$$REDIS_CLUSTER_URL"; \
	$(go-test) ./engine ./httpapi ./cmd/...

CHAOS_SCALE ?= 5
CHAOS_TESTS := TestChaos|TestFailover|TestRedisSentinelFailover|TestReconcile|TestRedisCluster|TestTokenMutations|TestLinearizable|TestPausedOwner|TestHoldLostBeforeCommit|TestRowLockTimeout|TestRedisLosesEverything|TestCounterWentBackwards|TestRedisOutOfMemory|TestFunctionFlush|TestBackendsDown

chaos: ## The fault suite and the linearizability check, CHAOS_SCALE times longer than in make test
	@$(with-services) \
	export TEST_DATABASE_URL="$${TEST_DATABASE_URL:-$$DATABASE_URL}" TEST_REDIS_URL="$${TEST_REDIS_URL:-$$REDIS_URL}" HOLDFAST_CHAOS_SCALE=$(CHAOS_SCALE); \
	go test -race -count=1 -v -timeout 60m -run '$(CHAOS_TESTS)' ./engine

FUZZTIME ?= 300000x
FUZZ_TARGETS := engine:FuzzKeys engine:FuzzFingerprint engine:FuzzValidation httpapi:FuzzDecode

fuzz: ## Run every fuzz target FUZZTIME executions (a count: Go 1.26 can fail a timed run at its deadline, golang/go#75804)
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz $$name ($$pkg, $(FUZZTIME))"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) ./$$pkg; \
	done

# The version of a build (holdfast version, the package's name): cmd/holdfast/VERSION,
# the newest release in CHANGELOG.md (a test checks), as it is on a clean checkout of that
# release's tag or without git (a tarball); else that release +dev.<revision>[.dirty]:
# v0.1.0+dev.1a2b3c4d5e6f, built after it. holdfast version says the same without make.
RELEASE  := $(shell cat cmd/holdfast/VERSION)
ifeq ($(origin VERSION),undefined)
VERSION  := $(shell rev=$$(git rev-parse --short=12 HEAD 2>/dev/null) || { echo '$(RELEASE)'; exit; }; \
	dirty=$$(test -z "$$(git status --porcelain 2>/dev/null)" || echo .dirty); \
	if [ -z "$$dirty" ] && [ "$$(git rev-parse -q --verify 'refs/tags/$(RELEASE)^{commit}')" = "$$(git rev-parse HEAD)" ]; \
	then echo '$(RELEASE)'; else echo "$(RELEASE)+dev.$$rev$$dirty"; fi)
endif
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -X main.stampedVersion=$(VERSION) -X main.stampedRevision=$(REVISION)
# The Debian version: without the v, any "-" made "+" (0.1.0+dev.1a2b3c4d5e6f).
PKG_VERSION := $(shell echo '$(VERSION)' | sed -e 's/^v//' -e 's/-/+/g')
IMAGE_TAG   := $(shell echo '$(PKG_VERSION)' | tr '+' '_')
NFPM := go run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2

build: ## Build bin/holdfast
	go build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/holdfast

static: ## Build dist/holdfast: static (no cgo), stripped, for the package and the image
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $(LDFLAGS)" -o dist/holdfast ./cmd/holdfast

deb: static ## Build dist/holdfast_VERSION_amd64.deb (nfpm): the binary, a systemd unit, /etc/holdfast/holdfast.env
	rm -f dist/holdfast_*.deb
	HOLDFAST_PACKAGE_VERSION=$(PKG_VERSION) $(NFPM) package -f deploy/package/nfpm.yaml -p deb -t dist/

image: static ## Build the OCI image holdfast:VERSION FROM scratch with buildah (deploy/Containerfile)
	cp /etc/ssl/certs/ca-certificates.crt dist/
	buildah --storage-driver vfs bud --isolation chroot -f deploy/Containerfile -t holdfast:$(IMAGE_TAG) .
	echo localhost/holdfast:$(IMAGE_TAG) > dist/image.txt

check-deploy: ## As root: install promtool and buildah, build the .deb and the image, install and start them (deploy/smoke.sh)
	@$(SERVICES) deploy-tools
	@$(MAKE) --no-print-directory deb image
	@$(with-services) ./deploy/smoke.sh

# make run and make demo are one machine playing every buyer, from one address: the
# per-address limits (meant for a crowd of real clients) are lifted for them.
LOCAL_LIMITS = --addr-rate-limit 1000000 --addr-rate-burst 1000000 --read-rate-limit 1000000 \
	--read-rate-burst 1000000 --max-seats-per-addr 1000000 --max-streams-per-addr 1000 --max-conns-per-addr 2000

run: build ## Start PostgreSQL and Redis (unless DATABASE_URL / REDIS_URL are set), migrate, serve the demo show on LISTEN_ADDR (127.0.0.1:8080)
	@$(with-services) $(with-operator-token) ./$(BIN) migrate up && exec ./$(BIN) serve --demo-show demo $(LOCAL_LIMITS)

bench: build ## Benchmarks side by side in one run: engine vs raw Redis and SQL, the on-sale vs a database-only design; charts in docs/bench (BENCH_FLAGS=…)
	@$(with-services) eval "$$($(SERVICES) browser)"; export HOLDFAST_CHROMIUM; \
	mkdir -p dist && ./$(BIN) bench --pg-max-conns 64 --json dist/bench.json --svg docs/bench $(BENCH_FLAGS)

abuse: build ## Run the attacks of docs/RELIABILITY.md ("Abuse") against two servers with default limits; prints a table (~4 min)
	@$(with-services) ./$(BIN) abuse

bench-quick: build ## A short on-sale (2,000 seats) for CI: it runs, and no seat is booked twice
	@$(with-services) ./$(BIN) bench --pg-max-conns 64 --quick

demo: build ## Simulate a sale opening against `make run`'s (or `make run-ha`'s) server (200 buyers, 500 seats and 100 standing places with a waitlist; DEMO_FLAGS=…)
	@if ha="$$($(HA) env 2>/dev/null)"; then set -a; eval "$$ha"; set +a; else $(with-services) true; fi; \
	$(with-operator-token) ./$(BIN) demo --url "$${HOLDFAST_URL:-http://$${HOLDFAST_ADDR:-$${LISTEN_ADDR:-127.0.0.1:8080}}}" \
		--admin-url "$${HOLDFAST_ADMIN_URL:-http://$${HOLDFAST_ADMIN_ADDR:-127.0.0.1:9090}}" $(DEMO_FLAGS)

run-ha: build ## Highly available on loopback: a pg_auto_failover formation, Redis with Sentinel, two serve replicas behind HAProxy on LISTEN_ADDR
	@set -a; svc="$$($(HA) start)" || exit 1; eval "$$svc"; set +a; $(with-operator-token) \
	./$(BIN) migrate up && $(HA) serve ./$(BIN) --demo-show demo $(LOCAL_LIMITS) && $(HA) status && \
	echo "serving on http://$${LISTEN_ADDR:-127.0.0.1:8080} — sell with: make demo DEMO_FLAGS='--seats 20000 --buyers 100'" && \
	echo "fail over with: $(HA) failover | $(HA) crash | $(HA) redis-failover | $(HA) kill-replica 1; stop: make ha-down"

ha-down: ## Stop what make run-ha started
	@$(HA) stop

screenshots: ## Regenerate docs/seatmap.png (make run's show mid-sale, 1280x900) and docs/queue.png from the real page in headless Chromium
	@$(with-services) eval "$$($(SERVICES) browser)"; export HOLDFAST_CHROMIUM; \
	TEST_DATABASE_URL="$${TEST_DATABASE_URL:-$$DATABASE_URL}" TEST_REDIS_URL="$${TEST_REDIS_URL:-$$REDIS_URL}" \
	HOLDFAST_SCREENSHOT=$(CURDIR)/docs/seatmap.png HOLDFAST_QUEUE_SCREENSHOT=$(CURDIR)/docs/queue.png \
	go test -count=1 -run 'TestSeatMapPageLoadsThenFits|TestWaitingRoomPageInABrowser' ./httpapi

readme: ## Write the table of environment variables (holdfast env) into docs/CONFIGURATION.md
	HOLDFAST_UPDATE_DOCS=1 go test -count=1 -run TestConfigurationListsEveryVariable ./cmd/holdfast
