#!/usr/bin/env bash
# Runs the crash test (tests/recovery/crash.c) on fsdax persistent memory: boots the guest of
# run.sh with an emulated PMem region (kernel argument memmap=, modules nd_e820 nd_pmem ext4),
# makes an ext4 file system on /dev/pmem0, mounts it with -o dax=always, and runs
# crash smallbank pandora and crash insdel pandora with their pools there: libpmem2 maps them
# with MAP_SYNC and persists with cache-line flushes, under kill -9 of whole clusters.
# On DAX a persist point is no msync, so the medium library sees nothing: REMORA_CRASH_POWER=0
# (kills only; the negative controls would skip).
# usage: scripts/rdma-vm/pmem-crash.sh [BUILD_DIR]
#   BUILD_DIR  default: build-pmem-vm in the source tree (configured here if missing)
#   env PMEM_VM_ITERS  iterations per configuration (default 3)
#       PMEM_VM_TIMEOUT  limit for the whole guest run, boot included (default 600 s)
# Results: BUILD_DIR/pmem-vm/summary.txt, one log per configuration beside it.
# Exit status: 0 passed, 1 failed, 77 cannot run here (reason printed), 124 time limit hit.
# Time: about 1 minute on a 2-core host (TCG: boot, 2 x 3 iterations), plus the build.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(realpath -m "${1:-$src/build-pmem-vm}")
export VM_EXTRA_MODULES="nd_e820 nd_pmem ext4"
export VM_APPEND="memmap=512M!1G" # 512 MiB of guest RAM at 1 GiB become /dev/pmem0

command -v mkfs.ext4 >/dev/null ||
	{ echo "pmem-vm: SKIP: mkfs.ext4 not found (the guest uses the host's: e2fsprogs)" >&2; exit 77; }
"$here/run.sh" --prepare || exit $?

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$src" >/dev/null ||
		{ echo "pmem-vm: meson setup failed" >&2; exit 1; }
fi
ninja -C "$build" apps/remora tests/recovery_crash tests/recovery_crash_wl \
	tests/libremora_medium.so >/dev/null ||
	{ echo "pmem-vm: build failed" >&2; exit 1; }

out=$build/pmem-vm
rm -rf "$out"
mkdir -p "$out"
cp "$here/pmem-guest.sh" "$out/pmem-guest.sh"
set +e
"$here/run.sh" -w "$out" -k "$build" -t "${PMEM_VM_TIMEOUT:-600}" -- \
	/bin/bash pmem-guest.sh "$build" "${PMEM_VM_ITERS:-3}" >"$out/console.txt" 2>&1
rc=$?
set -e
[ -f "$out/summary.txt" ] && { echo "== pmem-vm summary ($out/summary.txt)"; cat "$out/summary.txt"; }
case $rc in
0) echo "pmem-vm: all passed" ;;
77) grep -h "SKIP" "$out/console.txt" >&2 || true ;;
124) echo "pmem-vm: the guest hit its time limit; logs in $out" >&2 ;;
*) echo "pmem-vm: failures (exit $rc); logs in $out, console in $out/console.txt" >&2 ;;
esac
exit $rc
