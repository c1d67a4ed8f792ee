# idemgate — `make test` is what CI runs (.ci/run). It starts the real Redis
# servers the store tests need (installing Debian's redis-server when it is
# missing) and stops them again.
GO        ?= go
REDIS_DIR ?= $(CURDIR)/.tmp/redis
PKGS      ?= ./...
FUZZTIME  ?= 10s
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all test test-deploy test-monitoring bench-e2e check fmt-check vet unit build bench fuzz redis-start redis-stop lint clean

all: check build

build:
	$(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o bin/idemgate ./cmd/idemgate

check: fmt-check vet

fmt-check:
	@out=$$(gofmt -s -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt -s would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# test: format, vet, then every test under -race against real Redis servers
# (standalone, Cluster and Sentinel), which must be there (IDEMGATE_REQUIRE_REDIS=1).
test: fmt-check vet
	@bash scripts/redis-test.sh start $(REDIS_DIR)
	@set -e; trap 'bash scripts/redis-test.sh stop $(REDIS_DIR) >/dev/null 2>&1 || true' EXIT; \
	eval "$$(bash scripts/redis-test.sh env $(REDIS_DIR))"; \
	IDEMGATE_REQUIRE_REDIS=1 $(GO) test -race -shuffle=on -count=1 -timeout 20m $(PKGS); \
	$(MAKE) --no-print-directory validate-examples
	@$(MAKE) --no-print-directory test-deploy
	@$(MAKE) --no-print-directory test-monitoring

# test-deploy: the packaging proofs in their own module (deploy/test: Helm,
# k8s.io/api and BuildKit stay out of go.mod): chart render and lint for
# every scenario and Kubernetes 1.28/1.29/1.33, strict decoding, idemgate
# validate on the rendered configs, Dockerfile lint. No -race: it checks
# templates and files, not concurrent code, and Helm compiles slowly enough.
test-deploy:
	cd deploy/test && $(GO) vet ./... && $(GO) test -shuffle=on -count=1 -timeout 20m ./...

# test-monitoring: promtool (Debian's prometheus package, downloaded and
# unpacked under .tmp/promtool by scripts/promtool.sh, never installed or
# started) checks the alerting rules and runs their unit tests. The dashboard
# and the rules' metric names are checked in deploy/test (test-deploy).
PROMTOOL_DIR ?= $(CURDIR)/.tmp/promtool
test-monitoring:
	bash scripts/promtool.sh $(PROMTOOL_DIR) check rules deploy/monitoring/idemgate-rules.yaml
	cd deploy/monitoring && bash ../../scripts/promtool.sh $(PROMTOOL_DIR) test rules idemgate-rules.test.yaml

# unit: the tests without Redis (the Redis suites skip).
unit:
	$(GO) test -race -count=1 $(PKGS)

validate-examples:
	@for f in examples/*.yaml; do [ -e "$$f" ] || continue; \
		$(GO) run ./cmd/idemgate validate --config "$$f" >/dev/null || { echo "invalid example: $$f"; exit 1; }; done

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

# fuzz: each fuzz target for FUZZTIME.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzValidKey$$' -fuzztime $(FUZZTIME) ./proxy/
	$(GO) test -run '^$$' -fuzz '^FuzzFingerprint$$' -fuzztime $(FUZZTIME) ./proxy/
	$(GO) test -run '^$$' -fuzz '^FuzzAppend$$' -fuzztime $(FUZZTIME) ./internal/canonjson/
	$(GO) test -run '^$$' -fuzz '^FuzzParsePointer$$' -fuzztime $(FUZZTIME) ./internal/canonjson/
	$(GO) test -run '^$$' -fuzz '^FuzzMatch$$' -fuzztime $(FUZZTIME) ./internal/pathtmpl/
	$(GO) test -run '^$$' -fuzz '^FuzzNormalize$$' -fuzztime $(FUZZTIME) ./internal/pathtmpl/
	$(GO) test -run '^$$' -fuzz '^FuzzFinding2Spellings$$' -fuzztime $(FUZZTIME) ./internal/pathtmpl/
	$(GO) test -run '^$$' -fuzz '^FuzzConvertPath$$' -fuzztime $(FUZZTIME) ./internal/openapi/
	$(GO) test -run '^$$' -fuzz '^FuzzImportExtensions$$' -fuzztime $(FUZZTIME) ./internal/openapi/
	$(GO) test -run '^$$' -fuzz '^FuzzMerge$$' -fuzztime $(FUZZTIME) ./internal/openapi/
	$(GO) test -run '^$$' -fuzz '^FuzzClientAddr$$' -fuzztime $(FUZZTIME) ./limiter/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeAnswer$$' -fuzztime $(FUZZTIME) ./keystore/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodePlain$$' -fuzztime $(FUZZTIME) ./keystore/sealed/
	$(GO) test -run '^$$' -fuzz '^FuzzNormalize$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./internal/gql/
	$(GO) test -run '^$$' -fuzz '^FuzzParseRequest$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./internal/gql/
	$(GO) test -run '^$$' -fuzz '^FuzzResolveToken$$' -fuzztime $(FUZZTIME) ./internal/identity/

# lint: golangci-lint v2 (built with go install; slow, so not part of test).
lint:
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@latest run ./...

clean:
	rm -rf bin .tmp
