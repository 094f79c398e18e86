#!/usr/bin/env bash
# Runs remora on a real RDMA stack without an RDMA NIC: builds on the host, boots the soft-RoCE
# guest of run.sh, and runs there
#   1. the transport conformance suite with REMORA_BACKEND=rdma, tests/cluster/test_msg_peers
#      (compute nodes with a directory each meet through the control plane; negative control)
#      tests/cluster/test_no_device (providers hidden: one-line errors naming the devices) and
#      tests/cluster/test_rdma_params (device settings from a config file or flag are used),
#   2. remora verbs --backend rdma next to perftest (ib_read_lat, ib_write_lat, ib_atomic_lat)
#      on the same device, with the latency ratio per verb,
#   3. a short remora bench of kvs and smallbank with ford and pandora, 2 memory-node and
#      2 compute-node processes, each run checked,
#   4. online recovery: a compute node of `remora run --cn 3` (pandora) SIGKILLed, and one that
#      dies mid-commit; a survivor must recover it online and the check pass.
# usage: scripts/rdma-vm/run-tests.sh [--quick | --steps LIST] [BUILD_DIR]
#   --quick       step 1 only (same as --steps suite)
#   --steps LIST  comma list of suite, latency, bench, online (default: all four)
#   BUILD_DIR  default: build-rdma-vm in the source tree (configured here if missing)
# Results: BUILD_DIR/rdma-vm/summary.txt and one log per step beside it.
# Exit status: 0 all passed, 1 something failed, 77 cannot run here (reason printed).
# Time: boot ~15 s, --quick ~4 min, everything ~7 min on a 2-core host (TCG); bounded by
# RDMA_VM_TIMEOUT (default 1200 s) for the whole guest.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
steps=suite,latency,bench,online
case ${1:-} in
--quick) steps=suite; shift ;;
--steps) steps=$2; shift 2 ;;
esac
build=$(realpath -m "${1:-$src/build-rdma-vm}")

# Fail fast with 77 on machines that cannot boot the guest (arch, packages, kernel download).
"$here/run.sh" --prepare || exit $?

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$src" -Drdma=enabled >/dev/null ||
		{ echo "rdma-vm: meson setup failed (is libibverbs-dev/librdmacm-dev installed?)" >&2; exit 1; }
fi
ninja -C "$build" >/dev/null || { echo "rdma-vm: build failed" >&2; exit 1; }
ls "$build"/tests/test_transport_* >/dev/null 2>&1 ||
	{ echo "rdma-vm: no transport tests in $build (criterion missing?)" >&2; exit 1; }

out=$build/rdma-vm
rm -rf "$out"
mkdir -p "$out"
cp "$here/guest-tests.sh" "$out/guest-tests.sh"
set +e
RDMA_VM_TIMEOUT=${RDMA_VM_TIMEOUT:-1200} "$here/run.sh" -w "$out" -k "$build" -- \
	/bin/bash guest-tests.sh "$build" "$steps" >"$out/console.txt" 2>&1
rc=$?
set -e
if [ -f "$out/summary.txt" ]; then
	echo "== rdma-vm summary ($out/summary.txt)"
	cat "$out/summary.txt"
fi
case $rc in
0) echo "rdma-vm: all passed" ;;
77) grep -h "SKIP" "$out/console.txt" >&2 || true ;;
124) echo "rdma-vm: the guest hit its time limit; logs in $out" >&2 ;;
*) echo "rdma-vm: failures (exit $rc); logs in $out, console in $out/console.txt" >&2 ;;
esac
exit $rc
