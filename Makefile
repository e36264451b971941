# Developer shortcuts; scripts/ holds the real commands, so CI and make agree.
.PHONY: all tools generate lint test bench

all: test

# Install the pinned tools (buf, protoc plugins, grpcurl, staticcheck) and
# the Python and Node.js client dependencies.
tools:
	bash scripts/tools.sh

# Regenerate gen/ (Go and Python) from proto/.
generate: tools
	bash scripts/generate.sh

# Static checks: buf lint/format/breaking, go vet, staticcheck, go mod tidy.
lint:
	./scripts/test.sh tidy buf vet staticcheck

# Every check and test, exactly as CI runs it.
test:
	./scripts/test.sh

# Benchmarks; not part of test. BENCH selects, e.g. make bench BENCH=Append.
BENCH ?= .
bench:
	go test -run '^$$' -bench '$(BENCH)' -benchmem ./...
