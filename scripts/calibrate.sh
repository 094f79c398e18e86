#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Finds the memory-node scale K at which a baseline reaches its paper's knee on this host:
# runs `remora bench --sweep mn_scale=K... coros=C...` (one cluster per point) and hands the
# results to `remora bench --calibrate`, which prints the sweep table with utilization, the
# knee of every K and the K chosen. See docs/transport.md, "Calibration".
#
#   scripts/calibrate.sh [-k K,K,...] [-c C,C,...] [-d SECS] [-t TARGET] [-o DIR] REMORA [FLAGS...]
#
# Defaults: LOTUS's FORD knee: smallbank on ford, profile cx3, 3 memory nodes, 2 compute nodes
# x 1 thread, coordinators per thread 1..24, K 10,20,40,80, 2 s per point, target 45
# coordinators. FLAGS go to every run after the defaults (so --profile cx6 --mn 2 overrides).
# Exit status: that of remora bench --calibrate (0 a K qualifies, 1 none, 2 usage).
set -euo pipefail

ks=10,20,40,80
coros=1,2,4,8,16,24
dur=2
target=45
out=
usage() {
	sed -n '9,16p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
while getopts "k:c:d:t:o:h" opt; do
	case $opt in
	k) ks=$OPTARG ;;
	c) coros=$OPTARG ;;
	d) dur=$OPTARG ;;
	t) target=$OPTARG ;;
	o) out=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
remora=$1
shift
[ -x "$remora" ] || { echo "calibrate.sh: $remora: not an executable" >&2; exit 2; }
if [ -z "$out" ]; then
	out=$(mktemp -d "${TMPDIR:-/tmp}/remora-calibrate.XXXXXX")
fi
mkdir -p "$out"

"$remora" bench --workload smallbank --protocol ford --profile cx3 --mn 3 --cn 2 --threads 1 \
	--duration "$dur" --warmup 0.5 "$@" \
	--sweep "mn_scale=$ks" "coros=$coros" --json "$out/calibrate.json" >"$out/runs.log" 2>&1 ||
	echo "calibrate.sh: some points failed (see $out/runs.log)" >&2
echo "results: $out/calibrate.json (runs: $out/runs.log)"
exec "$remora" bench --calibrate "$out/calibrate.json" --target "$target"
