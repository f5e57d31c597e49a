# Herald — one binary for Pusher-compatible Channels and Beams-compatible Push.
# Every target a newcomer would guess: run, build, test, generate, check-generated, lint, bench.

GO         ?= go
TOOL       := $(GO) tool -modfile=tools/go.mod
COMPAT_DIR := scripts/compat
SPEC_DIR   := scripts/spec
TS_DIR     := gen/typescript

# Stamped into the binary (herald version) by build; the Dockerfile takes the same values as build args.
VERSION    ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo devel)
COMMIT     ?= $(shell git describe --always --dirty=+modified --abbrev=40 --exclude='*' 2>/dev/null)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS    := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILD_DATE)

# The container image make image tags, and the tool that builds and runs it.
IMAGE      ?= localhost/herald:dev
PODMAN     ?= podman
IMAGE_CTX  := bin/image

.PHONY: run build image test-image test-helm build-ts test test-go test-ts test-compat test-load-smoke generate check-generated check-tidy lint lint-spec docs check-docs bench bench-compare bench-fanout bench-cluster mutate clean

## run: serve on 127.0.0.1:8080 with ./herald.db (created on first start, credentials printed once)
run:
	HERALD_LOG_FORMAT=$${HERALD_LOG_FORMAT:-console} $(GO) run ./server

## build: the one binary, ./herald: static (no cgo), with its version stamped in
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o herald ./server

## image: the container image $(IMAGE) (default localhost/herald:dev; make image IMAGE=…) with podman, from the binary of build: scripts/Dockerfile's prebuilt stage, no registry needed (docker build -f scripts/Dockerfile . builds the binary itself)
image: build
	@# The context folder holds only what the prebuilt stage copies: the binary, and the
	@# volume's and /tmp's mount points with their modes (a COPY keeps a folder's contents' modes).
	rm -rf $(IMAGE_CTX) && mkdir -p $(IMAGE_CTX)/user/data $(IMAGE_CTX)/root/tmp
	chmod 0700 $(IMAGE_CTX)/user/data && chmod 1777 $(IMAGE_CTX)/root/tmp
	cp herald $(IMAGE_CTX)/herald
	@# --format docker keeps the HEALTHCHECK (the OCI format has none).
	$(PODMAN) build --format docker -f scripts/Dockerfile --build-arg BINARY=prebuilt \
	  --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg BUILD_DATE=$(BUILD_DATE) \
	  -t $(IMAGE) $(IMAGE_CTX)

## test: every test — Go (with the race detector), the TypeScript client package, the real-SDK compatibility suites, a load-tool smoke run, the image and the Helm chart
test: test-go test-ts test-compat test-load-smoke test-helm test-image

## test-helm: the Helm chart (scripts/helm/herald): helm lint, and each main value set rendered and decoded strictly into the Kubernetes API types (tools/helm, Helm's packages in their own module)
test-helm:
	cd tools/helm && $(GO) test -count=1 ./...
	cd tools/helm && $(GO) run . lint ../../scripts/helm/herald

## test-image: make image, then the container tests on it with podman (server/container_test.go): a node alone on its volume, a cluster of three, the Helm chart played with podman kube play
test-image: image $(COMPAT_DIR)/node_modules/.installed
	HERALD_IMAGE=$(IMAGE) $(GO) test -count=1 -timeout 20m -run '^TestContainer' ./server/

test-go:
	@# -timeout 30m: on a loaded machine server/node alone runs past go test's default 10 minutes.
	$(GO) test -race -count=1 -timeout 30m ./...
	@# The storage suite again on PostgreSQL (a real server the tests start, see storage/testpg).
	HERALD_TEST_DB=postgres $(GO) test -race -count=1 -timeout 30m ./storage/

## build-ts: the TypeScript client package (gen/typescript): npm ci, type-check and build its dist/
build-ts: $(TS_DIR)/node_modules/.installed
	cd $(TS_DIR) && npm run build

## test-ts: the TypeScript client package's own tests (signing, MD5, user tokens, type-level errors); its tests against a live Herald are in test-compat
test-ts: build-ts
	cd $(TS_DIR) && npm test

$(TS_DIR)/node_modules/.installed: $(TS_DIR)/package.json $(TS_DIR)/package-lock.json
	cd $(TS_DIR) && npm ci --no-audit --no-fund
	touch $@

test-compat: $(COMPAT_DIR)/node_modules/.installed build-ts
	@# Built as make build and the Dockerfile build it (TestImageContract too, which shares the build cache).
	@# --test-force-exit: a file whose tests are done ends, and takes its servers with it (killOnExit),
	@# even if a failed start left one running: a leak must fail a test, never hold CI to its limit.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(COMPAT_DIR)/herald ./server
	$(GO) build -o bin/fakegateways ./server/push/pushtest/cmd/fakegateways
	cd $(COMPAT_DIR) && HERALD_BIN=$(CURDIR)/$(COMPAT_DIR)/herald FAKEGW_BIN=$(CURDIR)/bin/fakegateways node --test --test-concurrency=1 --test-force-exit --test-reporter=spec

$(COMPAT_DIR)/node_modules/.installed: $(COMPAT_DIR)/package.json $(COMPAT_DIR)/package-lock.json
	cd $(COMPAT_DIR) && npm ci --no-audit --no-fund
	touch $@

## generate: regenerate gen/ from spec/ (the Go packages, and the TypeScript package's types)
generate: $(TS_DIR)/node_modules/.installed
	scripts/generate.sh

## check-generated: fail when gen/ is stale
check-generated: $(TS_DIR)/node_modules/.installed
	scripts/check-generated.sh

## check-tidy: fail when go mod tidy would change a go.mod or go.sum (the server's, tools/ and its programs')
check-tidy:
	$(GO) mod tidy -diff
	cd tools && $(GO) mod tidy -diff
	cd tools/load && $(GO) mod tidy -diff
	cd tools/baseline && $(GO) mod tidy -diff
	cd tools/helm && $(GO) mod tidy -diff

## lint: go vet and staticcheck (the server, and the limit baseline in tools/baseline), and lint-spec
lint: lint-spec
	@# gofmt over every Go file of the repository, the tools' modules included.
	@unformatted="$$(gofmt -l server storage tools gen)"; if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(TOOL) staticcheck $$($(GO) list ./... | grep -v /gen/)
	cd tools/baseline && $(GO) vet ./... && $(GO) tool -modfile=../go.mod staticcheck ./...

## lint-spec: Redocly CLI's lint of spec/ (OpenAPI and AsyncAPI, rules in scripts/spec/redocly.yaml), and the AsyncAPI parser on the WebSocket document
lint-spec: $(SPEC_DIR)/node_modules/.installed
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(SPEC_DIR)/node_modules/.bin/redocly lint --config $(SPEC_DIR)/redocly.yaml --format=stylish spec/*.yaml
	node $(SPEC_DIR)/validate-asyncapi.mjs spec/*.asyncapi.yaml

## docs: rebuild the HTML reference of spec/ that the server embeds and serves at /docs (server/docs/site)
docs: $(SPEC_DIR)/node_modules/.installed
	$(SPEC_DIR)/build-docs.sh

## check-docs: fail when server/docs/site, or the settings tables of README.md and server/config/README.md (server/config/vars.go), are stale
check-docs: $(SPEC_DIR)/node_modules/.installed
	@# The tables are rewritten by: go test ./server/config -run TestSettingsTables -update
	$(GO) test -count=1 -run '^TestSettingsTables$$' ./server/config/
	$(SPEC_DIR)/check-docs.sh

$(SPEC_DIR)/node_modules/.installed: $(SPEC_DIR)/package.json $(SPEC_DIR)/package-lock.json
	cd $(SPEC_DIR) && npm ci --no-audit --no-fund --ignore-scripts
	touch $@

## bench: Go benchmarks of the hot paths, then Herald against the limit baseline in every load scenario
bench:
	$(GO) test -run '^$$' -bench . -skip '^BenchmarkConnect$$' -benchmem ./...
	@# Its connections stay open: a fixed count keeps it within the open-file limit.
	$(GO) test -run '^$$' -bench '^BenchmarkConnect$$' -benchtime=5000x -benchmem ./server/ws/
	$(MAKE) bench-compare

## bench-compare: Herald and the limit baseline (tools/baseline) with tools/load and wrk, Herald ÷ baseline per scenario
bench-compare:
	scripts/bench-compare.sh

## bench-fanout: 10,000 idle connections (RSS each) and 10,000 subscribers at 20 events/s, with tools/load
bench-fanout:
	scripts/bench-fanout.sh

## bench-cluster: a cluster node against a single node end to end, three nodes against one (subscribers spread, every process's CPU; BENCH_PEER=centrifugo adds Centrifugo's rows, one node and three on its Redis engine, to compare), and 100,000 connections over six nodes with one broadcast (needs redis-server)
bench-cluster:
	scripts/bench-cluster.sh

## test-load-smoke: the load tool (tools/load) for a few seconds against Herald, the baseline (tools/baseline) and Centrifugo (HERALD_CENTRIFUGO_BIN, skipped without it but under CI=true), and bench-cluster's nodes part small and short, Centrifugo's rows too when HERALD_CENTRIFUGO_BIN is set (needs redis-server)
test-load-smoke:
	@[ -n "$$HERALD_CENTRIFUGO_BIN" ] || echo "test-load-smoke: HERALD_CENTRIFUGO_BIN is not set: the runs against Centrifugo are skipped (.ci/run builds it)"
	cd tools/load && $(GO) test -race -count=1 ./...
	cd tools/baseline && $(GO) test -race -count=1 ./...
	BENCH_CHECK=self scripts/bench-cluster.sh
	@# Two shapes, each of whose rows must say what it ran (one row per mode, Centrifugo's three included).
	@rows=2 peer=; if [ -n "$$HERALD_CENTRIFUGO_BIN" ]; then rows=5 peer=centrifugo; fi; \
	out=$$(BENCH_PEER=$$peer BENCH_CENTRIFUGO_BIN=$$HERALD_CENTRIFUGO_BIN BENCH_PARTS=nodes BENCH_NODES_SHAPES=20x2,30x3 BENCH_DURATION=2s BENCH_CHECK=1 GO=$(GO) scripts/bench-cluster.sh) && \
	  printf '%s\n' "$$out" && for shape in '20 subscribers, 2 channels' '30 subscribers, 3 channels'; do \
	    [ "$$(printf '%s\n' "$$out" | grep -c "^$$shape ")" = $$rows ] || { echo "test-load-smoke: bench-cluster ran no $$rows rows of $$shape" >&2; exit 1; }; \
	  done

## mutate: mutation testing (gremlins) of signing, beamsauth, webhook, push, httpapi, hub, ws, cluster, cluster/redisconn, netguard, storage, config, upgrade, clientrate, console/traffic, eventlog, idempotency; slow, not in test (one package: make mutate PKGS=./server/signing)
mutate:
	GO=$(GO) scripts/mutate.sh $(PKGS)

clean:
	rm -f herald $(COMPAT_DIR)/herald
