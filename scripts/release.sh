#!/usr/bin/env bash
# release.sh builds the release archives: sessiond, sessionctl and
# sessiond-load for each target, statically linked (CGO_ENABLED=0), with the
# version stamped in (each binary's --version prints it), one
# sessiond_VERSION_OS_ARCH.tar.gz per target holding the three binaries,
# README.md, CHANGELOG.md and the packaging/ files, and a SHA256SUMS file
# over the archives.
#
# Usage: scripts/release.sh [VERSION]
#
#   VERSION   the version to stamp, e.g. v0.1.0 (default: git describe
#             --tags --always --dirty, so an untagged or modified checkout
#             says so)
#   OUT       the output folder (default dist/VERSION); it must not exist
#             or be empty
#   TARGETS   space-separated GOOS/GOARCH pairs (default: linux/amd64
#             linux/arm64 darwin/amd64 darwin/arm64)
#
# It prints the archives and SHA256SUMS it wrote, and checks the stamp of
# the host's own target when it is among TARGETS. A target that does not
# build is reported at the end and fails the run (exit 1).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

version=${1:-$(git describe --tags --always --dirty 2>/dev/null || true)}
if [[ -z $version ]]; then
	echo "release.sh: no VERSION given and git describe found none; run: scripts/release.sh v0.1.0" >&2
	exit 2
fi
if [[ ! $version =~ ^[A-Za-z0-9][A-Za-z0-9._+-]*$ ]]; then
	echo "release.sh: VERSION '$version' may hold only letters, digits and . _ + -" >&2
	exit 2
fi
out=${OUT:-dist/$version}
targets=${TARGETS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
binaries=(sessiond sessionctl sessiond-load)

if [[ -e $out && -n $(ls -A "$out") ]]; then
	echo "release.sh: $out is not empty; remove it or set OUT" >&2
	exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
failed=()
trap 'rm -rf "$work"' EXIT

for target in $targets; do
	os=${target%/*} arch=${target#*/}
	if [[ $target != */* || -z $os || -z $arch ]]; then
		echo "release.sh: target '$target' is not GOOS/GOARCH" >&2
		exit 2
	fi
	name=sessiond_${version}_${os}_${arch}
	dir=$work/$name
	mkdir -p "$dir"
	built=1
	for bin in "${binaries[@]}"; do
		if ! CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
			-ldflags "-s -w -X main.version=$version" -o "$dir/$bin" "./cmd/$bin"; then
			failed+=("$target ($bin)")
			built=0
			break
		fi
	done
	((built)) || continue
	cp README.md CHANGELOG.md "$dir/"
	cp -r packaging "$dir/packaging"
	# Sorted names, fixed owner and times: the same tree gives the same tar.
	tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner \
		--mtime="@$(git log -1 --format=%ct 2>/dev/null || echo 0)" \
		-czf "$out/$name.tar.gz" "$name"
	if [[ $os == $(go env GOHOSTOS) && $arch == $(go env GOHOSTARCH) ]]; then
		for bin in "${binaries[@]}"; do
			got=$("$dir/$bin" --version)
			if [[ $got != "$bin $version" ]]; then
				echo "release.sh: $bin --version printed '$got', want '$bin $version'" >&2
				exit 1
			fi
		done
	fi
done

if compgen -G "$out/*.tar.gz" >/dev/null; then
	(cd "$out" && sha256sum -- *.tar.gz >SHA256SUMS)
fi
ls -l "$out"
# A target that does not build fails the release, after the others are
# built, so that one run shows every target's errors.
if ((${#failed[@]})); then
	echo "release.sh: these targets did not build (errors above): ${failed[*]}" >&2
	exit 1
fi
