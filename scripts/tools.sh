#!/usr/bin/env bash
# Installs what sessiond's checks and tests need, at pinned versions, and does
# nothing for what is already there, so it is quick to run every time:
#   - Go tools (buf, protoc-gen-go, protoc-gen-go-grpc,
#     protoc-gen-grpc-gateway, protoc-gen-openapiv2, grpcurl, staticcheck)
#     with `go install` into $(go env GOPATH)/bin (buf from its npm package
#     where that works: it is much faster than building it);
#   - Debian's python3-grpcio and python3-grpc-tools (the Python client
#     tests and scripts/gen-python.sh), systemd (systemd-analyze checks
#     packaging/sessiond.service), chromium (the viewer's browser tests
#     drive it headless), curl (docs/http.md's walkthrough), prometheus
#     (promtool checks packaging/prometheus's alert rules) and, when
#     missing, postgresql (the tests' private server, scripts/postgres.sh),
#     with apt-get;
#   - Node.js and npm if missing (apt-get), then the Node.js client's
#     packages with `npm ci` in clients/node;
#   - the Go module's dependencies (go mod download).
# It expects Debian (or Ubuntu), root or sudo, Go on PATH, and the Go module
# proxy, Debian's archive and the npm registry reachable.
#
# Usage: scripts/tools.sh          (tests source it as well; see scripts/test.sh)
set -euo pipefail

cd "$(dirname "$0")/.."

# Pinned versions: bump here, and nowhere else.
BUF_VERSION=v1.75.0
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
# The HTTP gateway's generators; keep in step with grpc-gateway/v2 in go.mod.
GRPC_GATEWAY_VERSION=v2.33.0
GRPCURL_VERSION=v1.9.4
STATICCHECK_VERSION=v0.8.2

if ! command -v go >/dev/null; then
	echo "tools: go is not on PATH; install Go 1.26 or later first" >&2
	exit 1
fi

# The first GOPATH entry's bin, where `go install` puts tools unless GOBIN
# says otherwise; we set GOBIN to it so the two always agree.
TOOLBIN="$(go env GOPATH | cut -d: -f1)/bin"
export PATH="$TOOLBIN:$PATH"

# go_tool NAME PACKAGE MODULE VERSION [BUILDFLAG...] installs
# PACKAGE@VERSION unless $TOOLBIN/NAME was already built from MODULE at
# VERSION (read from the binary's build info, so a different version on
# PATH is not mistaken for it).
go_tool() {
	local name=$1 pkg=$2 mod=$3 version=$4 have=""
	shift 4
	if [[ -x "$TOOLBIN/$name" ]]; then
		have=$(go version -m "$TOOLBIN/$name" 2>/dev/null | awk -v m="$mod" '$1 == "mod" && $2 == m { print $3 }')
	fi
	if [[ "$have" == "$version" ]]; then
		return 0
	fi
	echo "tools: go install $pkg@$version${have:+ (replacing $have)}"
	GOBIN="$TOOLBIN" go install "$@" "$pkg@$version"
}

# install_buf takes buf's released binary from its npm package, which
# installs in seconds where building it with go install takes minutes; the
# binary must then say it is the pinned version. It builds from source where
# npm or a binary for this machine is missing.
install_buf() {
	local pkg tmp
	if [[ -x "$TOOLBIN/buf" && "$("$TOOLBIN/buf" --version 2>/dev/null)" == "${BUF_VERSION#v}" ]]; then
		return 0
	fi
	case "$(uname -s)-$(uname -m)" in
	Linux-x86_64) pkg=@bufbuild/buf-linux-x64 ;;
	Linux-aarch64) pkg=@bufbuild/buf-linux-aarch64 ;;
	*) pkg="" ;;
	esac
	if [[ -n "$pkg" ]] && command -v npm >/dev/null; then
		tmp=$(mktemp -d)
		if npm install --prefix "$tmp" --no-save --no-audit --no-fund --loglevel=error "$pkg@${BUF_VERSION#v}" &&
			[[ "$("$tmp/node_modules/$pkg/bin/buf" --version 2>/dev/null)" == "${BUF_VERSION#v}" ]]; then
			echo "tools: buf $BUF_VERSION from npm ($pkg)"
			mkdir -p "$TOOLBIN"
			install -m 0755 "$tmp/node_modules/$pkg/bin/buf" "$TOOLBIN/buf"
			rm -rf "$tmp"
			return 0
		fi
		rm -rf "$tmp"
		echo "tools: buf from npm failed; building it with go install" >&2
	fi
	go_tool buf github.com/bufbuild/buf/cmd/buf github.com/bufbuild/buf "$BUF_VERSION"
}

# Debian packages: installed only when missing, and the package lists are
# fetched only then. apt-get's own output goes to a log, shown on failure.
apt_install() {
	local sudo="" p missing=() log
	if [[ "$(id -u)" != 0 ]]; then
		sudo=sudo
	fi
	local apt_packages=(python3-grpcio python3-grpc-tools python3-venv python3-setuptools systemd chromium curl)
	if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
		apt_packages+=(nodejs npm)
	fi
	# promtool checks packaging/prometheus's alert rules.
	apt_packages+=(prometheus)
	# The tests' private PostgreSQL (scripts/postgres.sh, which would install
	# it too, but only later, when the test check starts).
	if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
		apt_packages+=(postgresql)
	fi
	for p in "${apt_packages[@]}"; do
		if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
			missing+=("$p")
		fi
	done
	if ((${#missing[@]} == 0)); then
		return 0
	fi
	if ! command -v apt-get >/dev/null; then
		echo "tools: missing ${missing[*]} and no apt-get to install them" >&2
		return 1
	fi
	echo "tools: apt-get install ${missing[*]}"
	log=$(mktemp)
	if ! { $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		return 1
	fi
	rm -f "$log"
}

# npm_ci installs the Node.js client's packages, exactly as
# package-lock.json pins them. A stamp of the lock file's hash skips
# `npm ci` when nothing changed.
npm_ci() {
	local stamp want
	if [[ ! -f clients/node/package.json ]]; then
		return 0
	fi
	stamp=clients/node/node_modules/.sessiond-lock.sha256
	want=$(sha256sum clients/node/package-lock.json | cut -d' ' -f1)
	if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
		echo "tools: npm ci in clients/node"
		(cd clients/node && npm ci --no-audit --no-fund --loglevel=error)
		echo "$want" >"$stamp"
	fi
}

# timed NAME CMD... runs CMD and says how long it took when that was more
# than a second, so a slow fresh install shows where its time went.
timed() {
	local name=$1 t0=$SECONDS
	shift
	"$@" || return
	if ((SECONDS - t0 > 1)); then
		echo "tools: $name took $((SECONDS - t0))s"
	fi
}

# go_tools installs the go-installed tools. Two go commands do not share
# work in progress: the six installs side by side each compiled their own
# copy of the standard library and of what they share (ps showed go/types
# compiled by five go commands at once on a fresh cache). So protoc-gen-go
# goes first, alone (the standard library's core and protobuf, which the
# others build on), then two lanes, each install reusing the cache of the
# ones before it: grpcurl (half of all the compiling: grpc and its xDS
# dependencies) beside the rest, so that the other lane's links and
# module loads, which use one core, do not leave the second one idle. A
# failed install does not stop the others; the function then fails.
#
# grpcurl and the gateway's generators are compiled without optimisation
# (-N -l) outside the standard library: the checks run them for
# milliseconds, and an unoptimised compile of their dependencies (grpcurl's
# alone are 431 packages, xDS included) takes about a quarter less CPU. The
# standard library keeps the default flags, so it is compiled once for
# every tool and for the module.
go_tools() {
	local rc=0 lane quick=(-gcflags='all=-N -l' -gcflags='std=')
	timed protoc-gen-go go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/protobuf "$PROTOC_GEN_GO_VERSION" || rc=1
	timed grpcurl go_tool grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl github.com/fullstorydev/grpcurl "$GRPCURL_VERSION" "${quick[@]}" &
	lane=$!
	timed protoc-gen-go-grpc go_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" || rc=1
	timed protoc-gen-grpc-gateway go_tool protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2 "$GRPC_GATEWAY_VERSION" "${quick[@]}" || rc=1
	timed protoc-gen-openapiv2 go_tool protoc-gen-openapiv2 github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2 github.com/grpc-ecosystem/grpc-gateway/v2 "$GRPC_GATEWAY_VERSION" "${quick[@]}" || rc=1
	timed staticcheck go_tool staticcheck honnef.co/go/tools/cmd/staticcheck honnef.co/go/tools "$STATICCHECK_VERSION" || rc=1
	wait "$lane" || rc=1
	return "$rc"
}

# The lanes below run side by side: on a fresh machine the go installs are
# compiles (CPU), while apt-get, npm and module downloads mostly wait on the
# network and dpkg, so they overlap well. Only what needs npm waits for
# apt-get when apt-get must install npm first.
pids=()
if command -v npm >/dev/null && command -v node >/dev/null; then
	timed apt-get apt_install &
	pids+=($!)
	{ timed buf install_buf && timed "npm ci" npm_ci; } &
	pids+=($!)
else
	{ timed apt-get apt_install && timed buf install_buf && timed "npm ci" npm_ci; } &
	pids+=($!)
fi
# The module's own dependencies (quick when they are there): the tidy, vet
# and test checks would otherwise wait for their download after the tools.
timed "go mod download" go mod download &
pids+=($!)
go_tools &
pids+=($!)
failed=0
for pid in "${pids[@]}"; do
	wait "$pid" || failed=1
done
if ((failed)); then
	echo "tools: an install failed (see above)" >&2
	exit 1
fi
