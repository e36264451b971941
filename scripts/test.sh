#!/usr/bin/env bash
# The one test command of sessiond: the README gives it, and `make test` and CI run it.
#
# On a fresh Debian machine (root or sudo; Go, the Go module proxy, Debian's
# archive and the npm registry reachable) it first installs what the checks
# need (scripts/tools.sh: quick when all is there), then runs every check:
#
#   generated    buf generate + scripts/gen-python.sh leave gen/,
#                httpapi/gateway/ and httpapi/openapi/ (the OpenAPI
#                document) unchanged
#   tidy         go mod tidy would change nothing, in each module
#   sdkdeps      the SDK's modules (client/, gen/) need none of the daemon's
#                dependencies: a program that uses the SDK builds without them
#   buf          buf lint, buf format, buf breaking against proto/released.binpb
#   fmt          gofmt would change no Go file
#   vet          go vet on every package of every module
#   staticcheck  staticcheck on every package of every module
#   fuzz         every FuzzXxx target for $FUZZTIME (default 3s), one after
#                another, from one instrumented test binary per package
#   test         go test -race -vet=off (vet is its own check) on every
#                package of every module: unit, conformance, integration
#                and client tests, against a private PostgreSQL
#                (scripts/postgres.sh)
#
# The modules are the root (the daemon and its tools), client/ (the Go SDK)
# and gen/ (the generated Go API); go.work joins them, so one go command
# covers all three with ./... ./client/... ./gen/...
#
# Every check runs even after one fails; the summary at the end names the
# failed ones, and the exit status is non-zero if any failed.
#
# Usage: scripts/test.sh [CHECK...]     e.g. scripts/test.sh vet test
set -euo pipefail

cd "$(dirname "$0")/.."

all_checks=(generated tidy sdkdeps buf fmt vet staticcheck fuzz test)
if (($#)); then
	checks=("$@")
	for c in "${checks[@]}"; do
		if [[ " ${all_checks[*]} " != *" $c "* ]]; then
			echo "test.sh: unknown check $c; choose from: ${all_checks[*]}" >&2
			exit 2
		fi
	done
else
	checks=("${all_checks[@]}")
fi

FUZZTIME=${FUZZTIME:-3s}
modules=(. client gen)
packages=(./... ./client/... ./gen/...)
started=$(date +%s)

echo "==> tools"
bash scripts/tools.sh
export PATH="$(go env GOPATH | cut -d: -f1)/bin:$PATH"
echo "$(go version); buf $(buf --version); node $(node --version)"
summary=("$(printf 'ok    %4ds  %s' "$(($(date +%s) - started))" tools)")

check_generated() {
	if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		echo "not a git work tree: cannot tell whether generated code changed" >&2
		return 1
	fi
	bash scripts/generate.sh
	local dirty
	dirty=$(git status --porcelain --untracked-files=all -- gen/ httpapi/gateway/ httpapi/openapi/)
	if [[ -n "$dirty" ]]; then
		echo "generated code is stale or uncommitted; run scripts/generate.sh (make generate) and commit:" >&2
		echo "$dirty" >&2
		git --no-pager diff --stat -- gen/ httpapi/gateway/ httpapi/openapi/ >&2
		return 1
	fi
}

check_tidy() {
	# -diff changes nothing and fails when tidy would change go.mod or go.sum.
	local m failed=0
	for m in "${modules[@]}"; do
		echo "--- $m"
		(cd "$m" && go mod tidy -diff) || failed=1
	done
	return "$failed"
}

# The daemon's dependencies, by module path prefix, that must never reach a
# program through the SDK.
daemon_only_deps=(
	github.com/jackc/pgx
	github.com/jackc/tern
	github.com/chromedp
	github.com/spf13/cobra
	github.com/prometheus
	github.com/grpc-ecosystem/grpc-gateway
	github.com/chzyer/readline
)

check_sdkdeps() {
	# GOWORK=off: each module alone, as a program that requires it sees it.
	# `go list -m all` is the whole module graph (tests included); the
	# package list is what a build of the SDK compiles.
	local m pat found failed=0
	for m in client gen; do
		found=$(cd "$m" && { GOWORK=off go list -m all && GOWORK=off go list -deps -test ./...; })
		for pat in "${daemon_only_deps[@]}"; do
			if grep -F -- "$pat" <<<"$found"; then
				echo "module $m depends on $pat, which only the daemon may need" >&2
				failed=1
			fi
		done
	done
	return "$failed"
}

check_buf() {
	buf lint
	buf format -d --exit-code
	buf breaking --against proto/released.binpb
}

check_fmt() {
	local files
	files=$(gofmt -l .)
	if [[ -n $files ]]; then
		echo "gofmt would change these files (run gofmt -w on them):"
		echo "$files"
		return 1
	fi
}

check_vet() {
	go vet "${packages[@]}"
}

check_staticcheck() {
	staticcheck "${packages[@]}"
}

# fuzz_targets prints "DIR NAME" for every fuzz target of the module.
fuzz_targets() {
	git ls-files --cached --others --exclude-standard -- '*_test.go' |
		xargs -r grep -HoE '^func Fuzz[A-Za-z0-9_]*\(' |
		sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#; s#^[^/ ]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#. \1#' |
		sort -u
}

# fuzz_one BINARY DIR NAME CACHE fuzzes one target for $FUZZTIME. Go 1.26's
# fuzz coordinator can report a bare "context deadline exceeded" when
# -fuzztime ends while a starved worker is mid-call (golang/go#75804, fixed
# in Go 1.27): no input failed and nothing was written to testdata. Only
# that exact outcome is run once more; any failing input, panic or other
# error fails at once, and a second deadline report fails too.
fuzz_one() {
	local bin=$1 dir=$2 name=$3 cache=$4 out try
	out=$(mktemp)
	for try in 1 2; do
		if (cd "$dir" && "$bin" -test.run='^$' -test.fuzz="^${name}\$" \
			-test.fuzztime="$FUZZTIME" -test.timeout=10m -test.fuzzcachedir="$cache") 2>&1 | tee "$out"; then
			if grep -q 'not built with coverage instrumentation' "$out"; then
				echo "    $name: fuzzed without coverage guidance: check_fuzz's instrumentation flag no longer works" >&2
				break
			fi
			rm -f "$out"
			return 0
		fi
		if ((try == 1)) && grep -q 'context deadline exceeded' "$out" &&
			! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$out"; then
			echo "    $name: the fuzz coordinator's deadline race (golang/go#75804), no failing input; running it once more" >&2
			continue
		fi
		break
	done
	rm -f "$out"
	return 1
}

check_fuzz() {
	local targets dir name bin n=0 pkgs=() failed=() t0
	targets=$(fuzz_targets)
	if [[ -z "$targets" ]]; then
		echo "no fuzz targets"
		return 0
	fi
	# Each package's test binary is built once and runs every target of it
	# (a link saved per extra target). Each target still runs alone for the
	# whole $FUZZTIME with every core, as `go test -fuzz` would run it (same
	# flags, corpus in testdata/fuzz, cache under GOCACHE).
	#
	# Coverage guidance comes from the repository's own packages only (the
	# pattern below covers all three modules): they are compiled with the
	# fuzzer's coverage counters (-d=libfuzzer, what
	# `go test -fuzz` adds to every package), the code the targets decode
	# and check. `go test -fuzz` would instrument every dependency too
	# (gRPC, protobuf, ...), a second full compile of them that took half of
	# this check's time on two cores; uninstrumented, they are the ones vet
	# already compiled, taken from the build cache.
	bin=$(mktemp -d)
	trap 'rm -rf "$bin"' RETURN
	t0=$SECONDS
	mapfile -t pkgs < <(cut -d' ' -f1 <<<"$targets" | sort -u)
	# One go command for all of them, so that no two compile the same
	# package at once; it names each binary after its import path's last
	# element.
	go test -c -gcflags="$(GOWORK=off go list -m)/...=-d=libfuzzer" -o "$bin/" "${pkgs[@]/#/./}"
	echo "built ${#pkgs[@]} instrumented test binaries in $((SECONDS - t0))s"
	local cache pkg
	cache="$(go env GOCACHE)/fuzz"
	while read -r dir name; do
		echo "--- fuzz ./$dir $name ($FUZZTIME)"
		t0=$SECONDS
		pkg=$(go list "./$dir")
		if ! fuzz_one "$bin/${pkg##*/}.test" "$dir" "$name" "$cache/$pkg"; then
			failed+=("./$dir $name")
		fi
		echo "    $name: $((SECONDS - t0))s"
		n=$((n + 1))
	done <<<"$targets"
	echo "fuzzed $n targets"
	if ((${#failed[@]})); then
		printf 'fuzz target failed: %s\n' "${failed[@]}" >&2
		return 1
	fi
}

check_test() {
	# A private PostgreSQL for the storage/postgres and integration tests,
	# stopped when this check's subshell exits (scripts/postgres.sh). The
	# trap holds the folder's name itself: a local is gone by then.
	local pgdir
	pgdir=$(mktemp -d -t sessiond-pg.XXXXXX)
	# shellcheck disable=SC2064
	trap "bash scripts/postgres.sh stop '$pgdir'" EXIT
	SESSIOND_TEST_POSTGRES_DSN=$(bash scripts/postgres.sh start "$pgdir")
	export SESSIOND_TEST_POSTGRES_DSN
	# -count=1: the integration tests drive binaries built from other
	# packages, which the test cache does not track. -vet=off: the vet
	# check runs every vet analyzer on the same packages, test files
	# included; go test would run a subset of them again. -timeout is a
	# safety net for a hung test, not a speed goal: the integration package
	# alone takes about 6 minutes on an idle 2-core machine and more than 12
	# on a busy one.
	go test -race -count=1 -vet=off -timeout 30m "${packages[@]}"
}

failed=()
for c in "${checks[@]}"; do
	echo
	echo "==> $c"
	t0=$(date +%s)
	# The check runs in a subshell with `set -e` of its own, so that any
	# failing command fails it (a subshell inherits the `set +e` that lets
	# this loop go on after a failure, and without its own `set -e` a check
	# answered only for its last command: a failed fuzz target or buf lint
	# passed).
	set +e
	(
		set -e
		"check_$c"
	)
	rc=$?
	set -e
	took=$(($(date +%s) - t0))
	if ((rc == 0)); then
		summary+=("$(printf 'ok    %4ds  %s' "$took" "$c")")
	else
		summary+=("$(printf 'FAIL  %4ds  %s' "$took" "$c")")
		failed+=("$c")
		echo "==> FAILED: $c (exit status $rc)" >&2
	fi
done

echo
echo "==> summary ($(($(date +%s) - started))s in all)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
echo "PASS: all checks"
