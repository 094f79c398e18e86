#!/usr/bin/env bash
# OOCC against FORD under a cost profile, side by side in one run (docs/oocc.md,
# "Measurements"): YCSB read-only (C) and read-intensive (B) with 16 B values (the smallest
# YCSB record here) and 2 records per transaction, KVS with 10% updates, Zipf 0.99, TATP, at
# 1 coordinator (latency-bound) and 8 (throughput), each pair interleaved and repeated; then
# TPC-C with 8 warehouses, 32 coordinators and an 80 us lease. Prints one table of medians.
#
# usage: scripts/bench-oocc.sh [-r REPS] [-o DIR] [-P PROFILE] [-l LEASE] REMORA
#   REMORA   the remora executable (e.g. build/apps/remora)
#   -r REPS  repetitions of every pair (default 3)   -P PROFILE  cost profile (default cx3)
#   -l LEASE oocc's lease for the YCSB/KVS/TATP runs (default 10us)
#   -o DIR   where the JSON results go (default: a new directory under $TMPDIR)
set -uo pipefail

reps=3 out="" profile=cx3 lease=10us
while getopts "r:o:P:l:h" opt; do
	case $opt in
	r) reps=$OPTARG ;;
	o) out=$OPTARG ;;
	P) profile=$OPTARG ;;
	l) lease=$OPTARG ;;
	*) sed -n '2,13p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
	echo "bench-oocc: give the remora executable" >&2
	exit 2
fi
remora=$1
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/bench-oocc-XXXXXX")
mkdir -p "$out"

declare -A wl=(
	[ycsbC]="--workload ycsb --mix C --value-size 16 --ops-per-txn 2 --theta 0.99"
	[ycsbB]="--workload ycsb --mix B --value-size 16 --ops-per-txn 2 --theta 0.99"
	[kvs10]="--workload kvs --txn-keys 2 --update-pct 10 --theta 0.99"
	[tatp]="--workload tatp"
)
for rep in $(seq "$reps"); do
	for co in 1 8; do
		for w in ycsbC ycsbB kvs10 tatp; do
			for p in ford oocc; do
				# shellcheck disable=SC2086
				REMORA_OOCC=lease=$lease "$remora" bench ${wl[$w]} --profile "$profile" \
					--threads 1 --coros "$co" --duration 2 --warmup 1 --protocol "$p" \
					--json "$out/$w-c$co-$p-$rep.json" >"$out/$w-c$co-$p-$rep.log" 2>&1 ||
					echo "bench-oocc: $w $p failed (see $out/$w-c$co-$p-$rep.log)" >&2
			done
		done
	done
done
for p in ford oocc; do
	REMORA_OOCC=lease=80us "$remora" bench --workload tpcc --warehouses 8 --pool-size 256M \
		--profile "$profile" --threads 2 --coros 16 --duration 3 --warmup 1 --protocol "$p" \
		--json "$out/tpcc-c32-$p-1.json" >"$out/tpcc-c32-$p-1.log" 2>&1 ||
		echo "bench-oocc: tpcc $p failed (see $out/tpcc-c32-$p-1.log)" >&2
done
python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
d = sys.argv[1]
runs = {}
for f in glob.glob(os.path.join(d, "*.json")):
    w, c, p, _ = os.path.basename(f)[:-5].split("-")
    j = json.load(open(f))
    if j.get("error"):
        continue
    runs.setdefault((w, c), {}).setdefault(p, []).append(j)
def med(js, f):
    return statistics.median(f(j) for j in js)
print("%-7s %-4s %-5s %10s %8s %8s %7s %7s %7s" % ("work", "co", "proto", "txn/s", "p50 us",
      "p99 us", "abort%", "verbs", "dbells"))
for (w, c) in sorted(runs):
    ps = runs[(w, c)]
    for p in ("ford", "oocc"):
        if p not in ps:
            continue
        js = ps[p]
        print("%-7s %-4s %-5s %10.0f %8.1f %8.1f %7.2f %7.2f %7.2f" % (w, c, p,
              med(js, lambda j: j["committed_per_s"]),
              med(js, lambda j: j["latency_ns"]["p50"] / 1e3),
              med(js, lambda j: j["latency_ns"]["p99"] / 1e3),
              med(js, lambda j: 100 * j["abort_rate"]),
              med(js, lambda j: j["verbs_per_txn"]["total"]),
              med(js, lambda j: j["doorbells_per_txn"])))
    if "ford" in ps and "oocc" in ps:
        r = med(ps["oocc"], lambda j: j["committed_per_s"]) / med(ps["ford"], lambda j: j["committed_per_s"])
        print("%-7s %-4s oocc/ford throughput %.2fx" % (w, c, r))
PY
