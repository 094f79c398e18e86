#!/usr/bin/env bash
# Installs remora's build and test dependencies from Debian, then configures and builds ./build.
# Safe to run again: packages already present are skipped and an existing build dir is reused.
# Environment: BUILD_DIR (default build), MESON_ARGS (extra `meson setup` arguments).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential meson ninja-build pkg-config
	libibverbs-dev librdmacm-dev libpmem2-dev libnuma-dev liburing-dev libinih-dev libsodium-dev
	libxxhash-dev libcriterion-dev zlib1g-dev libjansson-dev gnuplot-nox
	libzookeeper-mt-dev zookeeperd)

missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "setup: installing ${missing[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

build=${BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
	# shellcheck disable=SC2086
	meson setup "$build" ${MESON_ARGS:-}
fi
ninja -C "$build"
echo "setup: built $build"
