# idemgate — `make test` is what CI runs (.ci/run). It starts the real Redis
# servers the store tests need (from Debian's packages unpacked into .tmp/debs
# when redis-server is missing: nothing is installed, no service is left
# behind; see scripts/redis-test.sh) and stops them again.
GO        ?= go
REDIS_DIR ?= $(CURDIR)/.tmp/redis
# cmd/idemgate's tests time a separate idemgate process's shutdown and sample
# its heap: they run alone, after the other packages' race tests, not beside
# them on a 2-core machine (MAINPKG).
MAINPKG   := ./cmd/idemgate
PKGS      ?= $(shell $(GO) list ./... | grep -v '/cmd/idemgate$$' | sed 's|^github.com/idemgate/idemgate|.|')
FUZZTIME  ?= 10s
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)
BIN       ?= $(CURDIR)/bin/idemgate

.PHONY: all docs test test-deploy test-stripe test-ietf test-console test-monitoring validate-examples need-gcc bench-e2e check fmt-check tidy-check vet unit build bench fuzz redis-start redis-stop lint clean

all: check build

build:
	$(GO) build -trimpath -ldflags "-X main.version=$(VERSION) -X main.revision=$(REVISION)" -o $(BIN) ./cmd/idemgate

check: fmt-check vet tidy-check

fmt-check:
	@out=$$(gofmt -s -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt -s would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS) $(MAINPKG)

# tidy-check: go.mod and go.sum of each module are what `go mod tidy` makes
# (direct dependencies marked direct, one version of each, nothing unused).
# `go mod tidy -diff` prints the change and fails instead of making it.
TIDY_MODULES ?= . deploy/test test/stripe admin/console/browsertest
tidy-check:
	@set -e; for m in $(TIDY_MODULES); do \
		(cd $$m && $(GO) mod tidy -diff) || { echo "go.mod of $$m is not tidy: run go mod tidy there" >&2; exit 1; }; done

# test: format, vet, then every test under -race against real Redis servers
# (standalone, Cluster and Sentinel), which must be there (IDEMGATE_REQUIRE_REDIS=1).
# The binary is built once (bin/idemgate) and given as IDEMGATE_BIN to every
# suite that runs it: cmd/idemgate's end-to-end test, validate-examples and
# test-deploy (each builds its own when IDEMGATE_BIN is unset).
test: fmt-check vet tidy-check need-gcc build
	@bash scripts/redis-test.sh start $(REDIS_DIR)
	@set -e; trap 'bash scripts/redis-test.sh stop $(REDIS_DIR) >/dev/null 2>&1 || true' EXIT; \
	env=$$(bash scripts/redis-test.sh env $(REDIS_DIR)); eval "$$env"; \
	IDEMGATE_BIN=$(BIN) IDEMGATE_REQUIRE_REDIS=1 $(GO) test -race -shuffle=on -count=1 -timeout 20m $(PKGS); \
	IDEMGATE_BIN=$(BIN) IDEMGATE_REQUIRE_REDIS=1 $(GO) test -race -shuffle=on -count=1 -timeout 10m $(MAINPKG); \
	$(MAKE) --no-print-directory validate-examples
	@$(MAKE) --no-print-directory test-deploy
	@$(MAKE) --no-print-directory test-monitoring
	@$(MAKE) --no-print-directory test-stripe
	@$(MAKE) --no-print-directory test-console

# test-deploy: the packaging proofs in their own module (deploy/test: Helm,
# k8s.io/api and BuildKit stay out of go.mod): chart render and lint for
# every scenario and Kubernetes 1.28/1.29/1.33, strict decoding, idemgate
# validate on the rendered configs, Dockerfile lint. No -race: it checks
# templates and files, not concurrent code, and Helm compiles slowly enough.
test-deploy: build
	cd deploy/test && $(GO) vet ./... && IDEMGATE_BIN=$(BIN) $(GO) test -shuffle=on -count=1 -timeout 20m ./...

# test-stripe: Stripe's own Go SDK (stripe-go) through idemgate with
# profile: stripe, against Stripe's own mock server (stripe-mock), both from
# the Go module proxy, in their own module (test/stripe) so go.mod stays
# clean: lost answers are retried by the SDK and every write runs once,
# typed SDK errors, one key on two connected accounts runs twice. No -race:
# a tooling test in its own module (the main module's tests run under -race).
test-stripe:
	cd test/stripe && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

# test-ietf: the public conformance vectors of the IETF Idempotency-Key draft
# (sns45/anyonce, Apache-2.0, not copied here: scripts/anyonce-vectors.sh
# fetches them from the Go module proxy, or takes IDEMGATE_ANYONCE_VECTORS)
# through idemgate with profile: ietf, on the memory store and, with
# scripts/redis-test.sh's variables exported, on Redis (docs/ietf.md).
test-ietf:
	@dir=$$(bash scripts/anyonce-vectors.sh) && \
	IDEMGATE_ANYONCE_VECTORS=$$dir $(GO) test -race -count=1 -v -run '^TestAnyonceVectors$$' ./internal/app/

# test-console: the operator console in headless Chromium, in its own
# module (admin/console/browsertest: chromedp stays out of go.mod).
# scripts/chromium.sh finds Chromium or installs Debian's package (as root;
# else unpacks it under .tmp/chromium); IDEMGATE_REQUIRE_BROWSER=1 makes a
# missing browser a failure, not a skip. Screenshots go to
# .tmp/artifacts/console. No -race: it drives a browser.
test-console:
	bash scripts/chromium.sh >/dev/null
	cd admin/console/browsertest && $(GO) vet ./... && IDEMGATE_REQUIRE_BROWSER=1 $(GO) test -count=1 -timeout 10m ./...

# test-monitoring: promtool (Debian's prometheus package, downloaded and
# unpacked under .tmp/promtool by scripts/promtool.sh, never installed or
# started) checks the alerting rules and runs their unit tests, and lints a
# running demo's /metrics (scripts/metrics-check.sh: promtool check
# metrics). The dashboard and the rules' metric names are checked in
# deploy/test (test-deploy); internal/app's TestMetricsMatchList checks a
# running app's families against deploy/monitoring/metrics.txt.
PROMTOOL_DIR ?= $(CURDIR)/.tmp/promtool
test-monitoring: build
	bash scripts/promtool.sh $(PROMTOOL_DIR) check rules deploy/monitoring/idemgate-rules.yaml
	cd deploy/monitoring && bash ../../scripts/promtool.sh $(PROMTOOL_DIR) test rules idemgate-rules.test.yaml
	bash scripts/metrics-check.sh $(BIN) $(PROMTOOL_DIR)

# unit: the tests without Redis (the Redis suites skip).
unit: need-gcc
	$(GO) test -race -count=1 $(PKGS) $(MAINPKG)

validate-examples: build
	@for f in examples/*.yaml; do [ -e "$$f" ] || continue; \
		$(BIN) validate --config "$$f" >/dev/null || { echo "invalid example: $$f"; exit 1; }; done

# need-gcc: -race needs cgo, so the C compiler of `go env CC` (gcc); like
# redis-server, it is installed from Debian's packages when missing (as root).
need-gcc:
	@cc=$$($(GO) env CC); command -v "$${cc%% *}" >/dev/null 2>&1 || { \
		[ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null || { \
			echo "$$cc is missing: go test -race needs a C compiler (apt-get install gcc)" >&2; exit 1; }; \
		echo "installing gcc: go test -race needs a C compiler" >&2; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends gcc libc6-dev >&2 || { \
			apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends gcc libc6-dev >&2; }; \
		command -v "$${cc%% *}" >/dev/null || { echo "$$cc is still missing after apt-get install gcc" >&2; exit 1; }; }

redis-start:
	bash scripts/redis-test.sh start $(REDIS_DIR)
redis-stop:
	bash scripts/redis-test.sh stop $(REDIS_DIR)

# bench: the Go benchmarks (fingerprint, stores, proxy hot path against a bare
# ReverseProxy in the same run). Numbers go to BENCHMARKS.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./proxy/ ./keystore/ ./keystore/memstore/ ./internal/canonjson/ ./internal/gql/ ./limiter/ ./session/

# bench-e2e: the end-to-end harness (bench/run.sh; installs nginx-light when
# missing, starts Redis). See BENCHMARKS.md.
bench-e2e:
	bash bench/run.sh

# fuzz: every fuzz target of the module (found by `go test -list`, so none
# is left out) for FUZZTIME each.
fuzz:
	GO=$(GO) bash scripts/fuzz.sh $(FUZZTIME)

# docs: renders docs/*.dot to SVG with Graphviz (installed from Debian's
# packages when dot is missing, as root; never part of `make test`). Each SVG
# gets its source's SHA-256 in a comment, which internal/docs compares with
# the source, so the check needs no Graphviz.
docs:
	@command -v dot >/dev/null 2>&1 || { \
		[ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null || { \
			echo "dot is missing: make docs needs Graphviz (apt-get install graphviz)" >&2; exit 1; }; \
		echo "installing graphviz: make docs renders docs/*.dot" >&2; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends graphviz >&2 || { \
			apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends graphviz >&2; }; }
	@set -e; for f in docs/*.dot; do \
		svg=$${f%.dot}.svg; sum=$$(sha256sum "$$f" | cut -d' ' -f1); \
		dot -Tsvg "$$f" | sed "1a<!-- rendered by make docs from $$(basename $$f) sha256:$$sum -->" > "$$svg.tmp"; \
		mv "$$svg.tmp" "$$svg"; echo "$$svg"; done

# lint: golangci-lint v2 at a pinned version (built by go run, which takes
# minutes the first time; so not part of test). Bump GOLANGCI_LINT_VERSION
# on purpose, never @latest: a new release brings new findings.
GOLANGCI_LINT_VERSION ?= v2.15.0
lint:
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

clean:
	rm -rf bin .tmp
