#!/usr/bin/env bash
# CREST against Motor and FORD under a cost profile, side by side (docs/crest.md, section 7):
# crest, crest without localized execution (--no-crest-localized, the Fig. 15 ablation),
# crest_record (record-level locks too: the "no techniques" point), motor and ford, on
# SmallBank (Zipf 0.99), YCSB A (4 cells of 40 B, 4 records per transaction, 50% updates,
# Zipf 0.99) and TPC-C at 1 warehouse, at C coordinators of one thread (the coordinators of a
# worker share its record cache). Every configuration is repeated and the table gives medians.
#
# usage: scripts/bench-crest.sh [-r REPS] [-c COROS] [-o DIR] [-P PROFILE] [-k K] [-d SECS] REMORA
#   REMORA     the remora executable (e.g. build/apps/remora)
#   -r REPS    repetitions (default 3)          -c COROS  coordinators (default 16)
#   -P PROFILE cost profile (default cx5)       -k K      memory-node scale (default 1)
#   -d SECS    measured seconds (default 2; TPC-C: 300 transactions per coordinator)
#   -o DIR     where the JSON results go (default: a new directory under $TMPDIR)
set -uo pipefail

reps=3 coros=16 out="" profile=cx5 secs=2 scale=1 tpcc_txns=300
while getopts "r:c:o:P:k:d:h" opt; do
	case $opt in
	r) reps=$OPTARG ;;
	c) coros=$OPTARG ;;
	o) out=$OPTARG ;;
	P) profile=$OPTARG ;;
	k) scale=$OPTARG ;;
	d) secs=$OPTARG ;;
	*) sed -n '2,14p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
	echo "bench-crest: give the remora executable" >&2
	exit 2
fi
remora=$1
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/bench-crest-XXXXXX")
mkdir -p "$out"

declare -A wl=(
	[smallbank]="--workload smallbank --accounts 100000 --dist zipf --theta 0.99"
	[ycsb]="--workload ycsb --records 100000 --value-size 160 --cells 4 --ops-per-txn 4 --mix A --theta 0.99 --pool-size 256M"
	[tpcc]="--workload tpcc --warehouses 1 --pool-size 256M"
)
declare -A variant=(
	[crest]="--protocol crest"
	[nolocal]="--protocol crest --no-crest-localized"
	[record]="--protocol crest_record"
	[motor]="--protocol motor"
	[ford]="--protocol ford"
)
order="crest nolocal record motor ford"
# TPC-C runs a count of transactions per coordinator: a timed run at a high rate fills the
# insert room of its tables (NewOrder, OrderLine, History).
length() {
	if [ "$1" = tpcc ]; then echo "--txns $tpcc_txns"; else echo "--duration $secs --warmup 1"; fi
}
for rep in $(seq "$reps"); do
	for w in smallbank ycsb tpcc; do
		for v in $order; do
			# shellcheck disable=SC2046,SC2086
			"$remora" bench ${wl[$w]} ${variant[$v]} --profile "$profile" \
				--mn-scale "$scale" --threads 1 --coros "$coros" $(length "$w") \
				--json "$out/$w-$v-$rep.json" >"$out/$w-$v-$rep.log" 2>&1 ||
				echo "bench-crest: $w $v failed (see $out/$w-$v-$rep.log)" >&2
		done
	done
done
python3 - "$out" "$order" <<'PY'
import glob, json, os, statistics, sys
d, order = sys.argv[1], sys.argv[2].split()
runs = {}
for f in glob.glob(os.path.join(d, "*.json")):
    w, v, _ = os.path.basename(f)[:-5].split("-")
    j = json.load(open(f))
    if j.get("error"):
        continue
    runs.setdefault(w, {}).setdefault(v, []).append(j)
def med(js, f):
    return statistics.median(f(j) for j in js)
def rate(js):
    return med(js, lambda j: j["committed_per_s"])
print("%-9s %-8s %10s %7s %7s %7s %7s %8s" % ("workload", "variant", "txn/s", "abort%",
      "verbs", "atomics", "dbells", "cpu us"))
for w in ("smallbank", "ycsb", "tpcc"):
    vs = runs.get(w, {})
    for v in order:
        if v not in vs:
            continue
        js = vs[v]
        print("%-9s %-8s %10.0f %7.2f %7.2f %7.2f %7.2f %8.2f" % (w, v, rate(js),
              med(js, lambda j: 100 * j["abort_rate"]),
              med(js, lambda j: j["verbs_per_txn"]["total"]),
              med(js, lambda j: sum(j["verbs_per_txn"].get(k, 0) for k in ("cas", "faa", "mcas"))),
              med(js, lambda j: j["doorbells_per_txn"]),
              med(js, lambda j: j["cpu_per_txn"]["ns"] / 1e3 if j.get("cpu_per_txn") else 0)))
    if "crest" in vs:
        line = [w, "ratios"]
        for v in ("motor", "ford", "nolocal", "record"):
            if v in vs:
                line.append("crest/%s %.2fx" % (v, rate(vs["crest"]) / rate(vs[v])))
        print("  ".join(line))
    if "crest" in vs and "record" in vs:
        a_rec = med(vs["record"], lambda j: j["abort_rate"])
        a_cell = med(vs["nolocal"], lambda j: j["abort_rate"]) if "nolocal" in vs else None
        if a_rec and a_cell is not None:
            print("%s false-conflict share of record-level aborts: %.0f%%" %
                  (w, 100 * (a_rec - a_cell) / a_rec))
PY
