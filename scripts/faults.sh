#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The fault campaign: runs remora's fault scenarios (docs/failures.md) on a build directory
# and prints one table of tries, losses and hangs.
#
#   scripts/faults.sh [--short] [--iters N] [BUILD_DIR]
#
#   --short    the CI form: few iterations per scenario (under 3 minutes on 2 cores)
#   --iters N  crashes per kill scenario (default 50; --short: 3); the online scenarios run
#              N / 2 each (at least 2)
#   BUILD_DIR  a configured and built meson directory (default: build)
#
# Scenarios:
#   kill-<workload>   tests/recovery/crash: SIGKILL of compute nodes (at random moments,
#                     protocol points and verbs) and of every process, restart on the kept
#                     pools, remora recover, then every acknowledged commit is checked; on
#                     pmem each crash is also a power failure, on shm (/dev/shm outlives
#                     processes, not the host) it is not
#   no-recover        compute nodes started before remora recover are refused
#   mn-killed         kill -9 of a memory node under compute nodes started by hand
#   mn-stopped        SIGSTOP of a memory node under remora bench
#   owner             a second memory node, --format and remora clean on a served pool
#   full-dir          a 64 MiB /dev/shm (private mount namespace; skipped unless root)
#   bad-pools         damaged, truncated and resized pool files
#   stranger          a peer without the cluster key on the control port: refused, logged at
#                     a bounded rate, unable to lock members out (tests/cluster/test_auth.c)
#   online-<check>    Pandora's online recovery under remora run --cn 3: one compute node
#                     dies (at a protocol point, at a verb, or by SIGKILL at a random time),
#                     the survivors recover it and go on, then --check; checks: litmus l1,
#                     l1-insdel and l2 (state invariants), kvs, smallbank (no lock left)
#
# A loss is a run whose check found data missing or wrong (or that failed otherwise); a hang
# is a run killed by its time limit. Exit status: 0 when there were neither, else 1.
set -u

short=0
iters=50
build=build
while [ $# -gt 0 ]; do
	case "$1" in
	--short) short=1; iters=3 ;;
	--iters) shift; iters="${1:?--iters needs a number}" ;;
	--help|-h) sed -n '3,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "faults.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	*) build="$1" ;;
	esac
	shift
done
case "$iters" in
''|*[!0-9]*) echo "faults.sh: --iters '$iters' is not a number" >&2; exit 2 ;;
esac
bin="$build/apps/remora"
crash="$build/tests/recovery_crash"
hosts="$build/tests/test_cluster_hosts"
auth="$build/tests/test_cluster_auth"
if [ ! -x "$bin" ] || [ ! -x "$hosts" ]; then
	echo "faults.sh: $build is not a built remora build directory (no $bin)" >&2
	exit 2
fi
src=$(cd "$(dirname "$0")/.." && pwd)
log=$(mktemp -d "${TMPDIR:-/tmp}/remora-faults-XXXXXX")
rows="$log/rows"
: > "$rows"
export REMORA_BIN="$bin" REMORA_SRCDIR="$src"

# row SCENARIO BACKEND PROTOCOL TRIES LOSSES HANGS SKIPPED
row() {
	echo "$1 $2 $3 $4 $5 $6 $7" >> "$rows"
}

# run LIMIT_S LOGNAME CMD...: 0 pass, 1 fail, 2 hang, 3 skipped (exit 77)
run() {
	limit=$1 name=$2
	shift 2
	timeout -k 10 "$limit" "$@" > "$log/$name.log" 2>&1
	rc=$?
	case $rc in
	0) return 0 ;;
	77) return 3 ;;
	124|137) return 2 ;;
	*) return 1 ;;
	esac
}

# One crash-test run of ITERS crashes counts ITERS tries; a failed check counts one loss.
crash_row() {
	wl=$1 proto=$2 be=$3
	if [ ! -x "$crash" ]; then
		row "kill-$wl" "$be" "$proto" 0 0 0 1
		return
	fi
	REMORA_CRASH_ITERS=$iters REMORA_CRASH_WL="$build/tests/recovery_crash_wl" \
	REMORA_MEDIUM_LIB="$build/tests/libremora_medium.so" REMORA_CRASH_BACKEND="$be" \
		run $((60 + iters * 20)) "crash-$wl-$proto-$be" "$crash" "$wl" "$proto"
	case $? in
	0) row "kill-$wl" "$be" "$proto" "$iters" 0 0 0 ;;
	1) row "kill-$wl" "$be" "$proto" "$iters" 1 0 0 ;;
	2) row "kill-$wl" "$be" "$proto" "$iters" 0 1 0 ;;
	3) row "kill-$wl" "$be" "$proto" 0 0 0 1 ;;
	esac
}

# A criterion suite (EXE), or the tests of it FILTER selects ("-": all), as one try.
suite_row() {
	scen=$1 exe=$2 filter=$3 be=$4
	if [ "$filter" = - ]; then
		run 300 "$scen" "$exe"
	else
		run 300 "$scen" "$exe" --filter "$filter"
	fi
	case $? in
	0) row "$scen" "$be" - 1 0 0 0 ;;
	1) row "$scen" "$be" - 1 1 0 0 ;;
	2) row "$scen" "$be" - 1 0 1 0 ;;
	3) row "$scen" "$be" - 0 0 0 1 ;;
	esac
}

hosts_row() {
	suite_row "$1" "$hosts" "hosts/$2" "$3"
}

for proto in ford pandora; do
	crash_row smallbank "$proto" pmem
	crash_row smallbank "$proto" shm
	if [ -x "$crash" ]; then
		REMORA_CRASH_WL="$build/tests/recovery_crash_wl" \
		REMORA_MEDIUM_LIB="$build/tests/libremora_medium.so" \
			run 300 "norecover-$proto" "$crash" unrecovered "$proto"
		case $? in
		0) row no-recover pmem "$proto" 1 0 0 0 ;;
		1) row no-recover pmem "$proto" 1 1 0 0 ;;
		2) row no-recover pmem "$proto" 1 0 1 0 ;;
		3) row no-recover pmem "$proto" 0 0 0 1 ;;
		esac
	fi
done
[ "$short" = 1 ] || crash_row kvs pandora pmem
hosts_row mn-killed a_killed_memory_node_stops_the_compute_nodes shm
hosts_row mn-stopped a_stopped_memory_node_fails_remora_bench shm
hosts_row owner a_served_pool_has_one_owner shm+pmem
hosts_row full-dir a_full_dev_shm_is_an_error_not_sigbus shm
hosts_row bad-pools shm_and_pmem_agree_on_pool_size_and_truncation shm+pmem
suite_row stranger "$auth" - shm
if [ -x "$crash" ]; then
	REMORA_CRASH_WL="$build/tests/recovery_crash_wl" \
	REMORA_MEDIUM_LIB="$build/tests/libremora_medium.so" run 300 bad-pools-pmem "$crash" bad-input
	case $? in
	0) row bad-pools pmem - 1 0 0 0 ;;
	1) row bad-pools pmem - 1 1 0 0 ;;
	2) row bad-pools pmem - 1 0 1 0 ;;
	3) row bad-pools pmem - 0 0 0 1 ;;
	esac
fi

# rnd N: a random number in 0 .. N-1
rnd() {
	echo $(( $(od -An -N4 -tu4 /dev/urandom) % $1 ))
}

# A protocol point of the commit path, at random.
point() {
	set -- txn.locked txn.logged txn.commit_write txn.commit_mid txn.unlock
	shift "$(rnd 5)"
	echo "$1"
}

# One online crash of compute node V of remora run (pandora, 2 memory nodes, 3 compute
# nodes), then the job's --check: the kill form is drawn at random.
online_once() {
	name=$1
	shift
	v=$(rnd 3)
	case $(rnd 3) in
	0) die="REMORA_DIE_AT=$(point):$(( $(rnd 300) + 1 ))" ;;
	1) die="REMORA_DIE_AT_VERB=$(( $(rnd 60000) + 2000 ))" ;;
	*) die= ;;
	esac
	if [ -n "$die" ]; then
		set -- --kill "cn$v@crash" --cn-env "$v:$die" "$@"
	else
		set -- --kill "cn$v@0.$(( $(rnd 9) + 1 ))s" "$@"
	fi
	echo "remora run --mn 2 --cn 3 --protocol pandora $*" > "$log/$name.cmd"
	run 180 "$name" "$bin" run --mn 2 --cn 3 --protocol pandora "$@"
}

# online_row CHECK BENCH-ARGS...: ITERS/2 (at least 2) online crashes, each a try.
online_row() {
	chk=$1
	shift
	n=$(( iters / 2 < 2 ? 2 : iters / 2 )) losses=0 hangs=0 recovered=0
	for i in $(seq 1 "$n"); do
		online_once "online-$chk-$i" bench --check "$@"
		case $? in
		1) losses=$((losses + 1)) ;;
		2) hangs=$((hangs + 1)) ;;
		esac
		grep -q "recovered here" "$log/online-$chk-$i.log" && recovered=$((recovered + 1))
	done
	# A node that finished before its death point leaves nothing to recover: say how many did.
	echo "online-$chk: $n runs, $recovered with a compute node recovered online"
	row "online-$chk" shm pandora "$n" "$losses" "$hangs" 0
}

online_row l1 --workload litmus --test l1 --rounds 60
online_row l1-insdel --workload litmus --test l1-insdel --rounds 60
online_row l2 --workload litmus --test l2 --rounds 60
online_row kvs --workload kvs --duration 1.5 --warmup 0
online_row smallbank --workload smallbank --duration 1.5 --warmup 0

printf '%-17s %-9s %-8s %6s %7s %6s\n' scenario backend protocol tries losses hangs
bad=0
while read -r scen be proto tries losses hangs skipped; do
	if [ "$skipped" = 1 ]; then
		printf '%-17s %-9s %-8s %6s %7s %6s\n' "$scen" "$be" "$proto" skip - -
		continue
	fi
	printf '%-17s %-9s %-8s %6s %7s %6s\n' "$scen" "$be" "$proto" "$tries" "$losses" "$hangs"
	[ "$losses" = 0 ] && [ "$hangs" = 0 ] || bad=1
done < "$rows"
if [ "$bad" = 1 ]; then
	echo "faults.sh: losses or hangs; logs in $log"
	exit 1
fi
rm -rf "$log"
echo "faults.sh: no loss, no hang"
exit 0
