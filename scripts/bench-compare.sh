#!/usr/bin/env bash
# Verbs per transaction on two settings, exactly: runs each workload x protocol once with the
# settings of side A and once with those of side B, each with `remora bench --txns N` on
# 1 memory node and 1 compute node x 1 thread x 1 coordinator (no contention, fixed seed: the
# same transactions on both sides), then `remora bench --compare` on every pair, which prints
# one table and fails on any difference in the per-op verb counts (docs/bench.md, "Comparing
# verb counts").
#
# usage: scripts/bench-compare.sh [-n TXNS] [-o DIR] [-w WORKLOADS] [-p PROTOCOLS]
#                                 REMORA "A SETTINGS" "B SETTINGS" [BENCH FLAGS...]
#   REMORA       the remora executable (e.g. build/apps/remora)
#   SETTINGS     one side's bench flags and NAME=VALUE environment assignments, words split on
#                blanks: "--backend shm", "--backend rdma", "--profile cx3 --atomics arbiter",
#                "REMORA_MUTATE=relaxed_locks" (a negative control: a mutation adds verbs)
#   BENCH FLAGS  given to every run of both sides (e.g. --pool-size 64M --lease-ms 20000)
#   -n TXNS      transactions per run (default 200)
#   -o DIR       where the results and logs go (default: a new directory under $TMPDIR)
#   -w LIST      workloads, comma-separated (default kvs,smallbank; 1000 keys / accounts)
#   -p LIST      protocols, comma-separated (default ford,pandora)
# Writes DIR/{a,b}-WORKLOAD-PROTOCOL.{json,log} and DIR/compare.txt (the table, also printed).
# Exit status: 0 every pair equal, 1 some pair differs, 2 bad usage or a run that failed.
set -uo pipefail

txns=200 out="" workloads=kvs,smallbank protocols=ford,pandora
while getopts "n:o:w:p:h" opt; do
	case $opt in
	n) txns=$OPTARG ;;
	o) out=$OPTARG ;;
	w) workloads=$OPTARG ;;
	p) protocols=$OPTARG ;;
	*) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -lt 3 ]; then
	echo "bench-compare: usage: bench-compare.sh [-n TXNS] [-o DIR] REMORA \"A SETTINGS\" \"B SETTINGS\" [BENCH FLAGS...]" >&2
	exit 2
fi
remora=$1 side_a=$2 side_b=$3
shift 3
common=("$@")
[ -x "$remora" ] || { echo "bench-compare: $remora is not an executable" >&2; exit 2; }
remora=$(realpath "$remora")
if [ -z "$out" ]; then
	out=$(mktemp -d "${TMPDIR:-/tmp}/remora-bench-compare.XXXXXX") || exit 2
fi
mkdir -p "$out" || exit 2

# Small tables: the comparison is about counts, and the rdma guest runs under emulation.
size_flags() {
	case $1 in
	kvs) echo "--keys 1000" ;;
	smallbank) echo "--accounts 1000" ;;
	ycsb) echo "--records 1000" ;;
	esac
}

# run SIDE SETTINGS WORKLOAD PROTOCOL: one bench run; its JSON is $out/SIDE-WORKLOAD-PROTOCOL.json
run() {
	local side=$1 wl=$3 proto=$4 env=() flags=() w base
	for w in $2; do
		if [[ $w =~ ^[A-Z_][A-Z0-9_]*= ]]; then env+=("$w"); else flags+=("$w"); fi
	done
	base=$out/$side-$wl-$proto
	# shellcheck disable=SC2046 # size_flags is a list of words
	env ${env[@]+"${env[@]}"} timeout -k 5 "${BENCH_COMPARE_TIMEOUT:-300}" "$remora" bench \
		--workload "$wl" $(size_flags "$wl") --protocol "$proto" --mn 1 --cn 1 \
		--threads 1 --coros 1 --txns "$txns" --seed 1 ${flags[@]+"${flags[@]}"} \
		${common[@]+"${common[@]}"} --json "$base.json" >"$base.log" 2>&1
}

files=() failed=0
for wl in ${workloads//,/ }; do
	for proto in ${protocols//,/ }; do
		for side in a b; do
			settings=$side_a
			[ $side = b ] && settings=$side_b
			if ! run $side "$settings" "$wl" "$proto"; then
				echo "bench-compare: $wl $proto on '$settings' failed; $out/$side-$wl-$proto.log:" >&2
				tail -5 "$out/$side-$wl-$proto.log" | sed 's/^/    /' >&2
				failed=1
			fi
			files+=("$side-$wl-$proto.json")
		done
	done
done
[ $failed = 0 ] || exit 2

echo "A = '$side_a', B = '$side_b' ($txns transactions per run, 1 coordinator, seed 1)" |
	tee "$out/compare.txt"
(cd "$out" && "$remora" bench --compare "${files[@]}") | tee -a "$out/compare.txt"
exit "${PIPESTATUS[0]}"
