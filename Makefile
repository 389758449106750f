.DEFAULT_GOAL := help
GOBIN ?= $(CURDIR)/.cache/bin
export GOBIN

# The library is the root module; examples/, s3taskotel/, s3tasknats/ and
# s3tasklambda/ are modules of their own (so the library's go.mod names none
# of their dependencies), tied in by go.work. In workspace mode ./... stops
# at a nested go.mod, so the commands name all five trees.
PKGS := ./... ./examples/... ./s3taskotel/... ./s3tasknats/... ./s3tasklambda/...

.PHONY: help
help: ## list the targets
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-18s %s\n", $$1, $$2}'

.PHONY: run
run: ## run the example service against an embedded S3
	go run ./examples/csvbatch

.PHONY: test
test: ## run the tests of every module
	go test -count=1 -timeout 30m $(PKGS)

.PHONY: test/race
test/race: ## run the tests with the race detector (the README's command)
	go test -race -count=1 -timeout 30m $(PKGS)

.PHONY: test/integration
test/integration: ## run the tests, also against versitygw and SeaweedFS servers on 127.0.0.1 (what CI runs)
	@test -x $(GOBIN)/versitygw || go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
	@test -x $(GOBIN)/nats-server || go install github.com/nats-io/nats-server/v2@v2.15.2
	@test -x $(GOBIN)/aws-lambda-rie || go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d
	bash .ci/seaweedfs.sh
	go run ./internal/cmd/s3gw -- go test -race -count=1 -timeout 30m $(PKGS)

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	go vet $(PKGS)
	go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(GOBIN)/staticcheck $(PKGS)

# The API check's apidiff; .ci/run installs the same version.
APIDIFF := golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4

.PHONY: api
api: ## after tagging a release: make api VERSION=vX.Y.Z writes api/vX.Y.Z, its API baseline, from a checkout of the tag; commit it
	@test -n "$(VERSION)" || { echo "usage: make api VERSION=vX.Y.Z (tag the release first)"; exit 2; }
	@test -x $(GOBIN)/apidiff || go install $(APIDIFF)
	@tmp=$$(mktemp -d) && git worktree add --detach "$$tmp/src" "$(VERSION)" && \
	{ go run ./internal/cmd/apicheck -apidiff $(GOBIN)/apidiff -dir "$$tmp/src" -write api/$(VERSION); rc=$$?; \
	git worktree remove --force "$$tmp/src"; rm -rf "$$tmp"; exit $$rc; }

.PHONY: api/check
api/check: ## compare the public API with the newest baseline in api/; fails on an incompatible change CHANGELOG's [Unreleased] does not name
	@test -x $(GOBIN)/apidiff || go install $(APIDIFF)
	go run ./internal/cmd/apicheck -apidiff $(GOBIN)/apidiff

.PHONY: bench
bench: ## run the benchmark program: S3 requests per task, idle cost, contention, baselines, paging, large inputs
	go run ./internal/cmd/bench

.PHONY: mutants
mutants: ## run every mutation of the library against the simulation (minutes)
	go run ./internal/cmd/mutants

.PHONY: test/outside
test/outside: ## test a host module outside the repository that uses s3task and s3tasktest, and check its go.sum
	bash .ci/outside.sh

.PHONY: tidy
tidy: ## go mod tidy in each module
	GOWORK=off go mod tidy
	cd examples && GOWORK=off go mod tidy
	cd s3taskotel && GOWORK=off go mod tidy
	cd s3tasknats && GOWORK=off go mod tidy
	cd s3tasklambda && GOWORK=off go mod tidy

.PHONY: bench/micro
bench/micro: ## run the micro-benchmarks with allocation counts
	go test -run '^$$' -bench . -benchmem .

.PHONY: ci
ci: ## run what CI runs
	bash .ci/run
