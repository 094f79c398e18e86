#!/bin/bash
# The in-guest half of run-tests.sh (runs inside the soft-RoCE guest, in the output dir).
# usage: guest-tests.sh BUILD_DIR [STEPS]   STEPS: comma list of suite,latency,bench,online (default all)
# Writes one log per step and summary.txt; exit status 0 when every step passed.
set -u
B=$1
STEPS=,${2:-suite,latency,bench,online},
export LANG=C TERM=dumb REMORA_PROFILE=none REMORA_ATOMICS=native
unset REMORA_BACKEND
fails=0

note() { echo "$*" | tee -a summary.txt; }
elapsed() { echo "$((SECONDS - $1))s"; }
missing() { # step, what is missing: a step asked for that cannot run has failed, not passed
	note "$1: FAIL ($2)"
	fails=$((fails + 1))
}
: >summary.txt

# A build the guest cannot see (say, hidden under its tmpfs) must not pass as zero failures.
if [ ! -x "$B/apps/remora" ]; then
	note "$B/apps/remora: not found in the guest (is the build dir visible? run.sh -k)"
	exit 1
fi

# ---- the device --------------------------------------------------------------------------------
ibv_devinfo -v -d rxe0 >devinfo.txt 2>&1
gid=$(awk '/GID\[/ && /::ffff:/ && /RoCE v2/ { sub(/.*GID\[ */, ""); sub(/\].*/, ""); print; exit }' devinfo.txt)
note "device: rxe0 on dummy0, RoCE v2 GID index ${gid:-?}, kernel $(uname -r)"
suites=0

# ---- transport conformance suite on the rdma backend ------------------------------------------
# Each executable exits 0 (pass), 77 (every test skipped) or 1; criterion bounds each test.
# Under TCG every wait and time limit of the suite is stretched by REMORA_TEST_TIME_SCALE
# (tests/transport/tutil.h), never the workload: concurrency::processes_and_threads_add_up alone
# runs about a minute here (two under ASan), past its 20 s wait at scale 1. A hung executable
# is cut at one scaled test limit (60 s x scale).
scale=${REMORA_TEST_TIME_SCALE:-10}
limit=${RDMA_VM_TEST_TIMEOUT:-$(awk -v s="$scale" 'BEGIN { printf "%d", 60 * s }')}
for t in "$B"/tests/test_transport_* "$B"/tests/test_rpc_*; do # rpc: docs/rpc.md
	[[ $STEPS == *,suite,* ]] || break
	[ -f "$t" ] && [ -x "$t" ] || continue
	name=${t##*/test_transport_}
	name=${name/#*test_rpc_/rpc_}
	case $name in pmem_*) continue ;; esac # pmem-only suites: they skip on rdma anyway
	suites=$((suites + 1))
	t0=$SECONDS
	REMORA_BACKEND=rdma REMORA_TEST_TIME_SCALE=$scale timeout -k 5 "$limit" "$t" \
		--color=never >"transport-$name.log" 2>&1
	rc=$?
	syn=$(grep -a "Synthesis:" "transport-$name.log" | tail -1 | sed 's/.*Synthesis: //; s/ *$//')
	case $rc in
	0) st=PASS ;;
	77) st=SKIP ;;
	124 | 137) st=TIMEOUT ;;
	*) st=FAIL ;;
	esac
	note "transport/$name@rdma: $st in $(elapsed "$t0") (${syn:-no synthesis})"
	if [ $st = FAIL ] || [ $st = TIMEOUT ]; then
		fails=$((fails + 1))
		grep -a '^\[FAIL\]\|hangs\|REMORA_TEST_TIME_SCALE' "transport-$name.log" | head -6 |
			sed 's/^/    /' | tee -a summary.txt
	fi
done
[[ $STEPS != *,suite,* ]] || ((suites)) || missing "transport@rdma" "no $B/tests/test_transport_*"

# ---- cluster tests that need a device: a skipped test is a failure here --------------------------
# tests/cluster/test_msg_peers.c: `remora run --cn 3 smoke` with a dir per compute node passes,
# and fails under its negative control (REMORA_MUTATE=no_msg_peers).
# tests/cluster/test_no_device.c: with libibverbs' providers hidden (a mount namespace), remora
# verbs and remora mn name the kernel's devices and the missing provider in one line.
# tests/cluster/test_rdma_params.c: rdma_device/port/gid_index/mtu from a config file or a flag
# reach the backend (remora mn refuses a value that does not fit, naming it).
for name in msg_peers no_device rdma_params; do
	[[ $STEPS == *,suite,* ]] || break
	t=$B/tests/test_cluster_$name
	[ -x "$t" ] || { missing "cluster/$name@rdma" "no $t"; continue; }
	t0=$SECONDS
	REMORA_BIN=$B/apps/remora timeout -k 5 "${RDMA_VM_TEST_TIMEOUT:-240}" "$t" --verbose \
		--color=never >"cluster-$name.log" 2>&1
	rc=$?
	syn=$(grep -a "Synthesis:" "cluster-$name.log" | tail -1 | sed 's/.*Synthesis: //; s/ *$//')
	case $rc in
	0) st=PASS ;;
	124 | 137) st=TIMEOUT ;;
	*) st=FAIL ;;
	esac
	grep -a -q '^\[SKIP\]' "cluster-$name.log" && st=FAIL
	note "cluster/$name@rdma: $st in $(elapsed "$t0") (${syn:-no synthesis})"
	if [ $st != PASS ]; then
		fails=$((fails + 1))
		grep -a '^\[FAIL\]\|^\[SKIP\]\|hangs' "cluster-$name.log" | head -6 | sed 's/^/    /' |
			tee -a summary.txt
	fi
done

# ---- latency: remora verbs --backend rdma next to perftest, same guest, same device -------------
# perftest: server and client on rxe0, out-of-band exchange over 127.0.0.1; t_typical is its
# median, t_avg its mean. remora verbs: p50 and mean of single-verb batches (see docs/verbs.md).
# ib_write_lat is a ping-pong and reports half a round trip: its row compares with twice that.
perftest() { # name, tool, extra args
	local log=perftest-$1.log srv
	timeout 120 "$2" -d rxe0 -x "$gid" -F -n 2000 "${@:3}" >"$log.srv" 2>&1 &
	srv=$!
	for _ in 1 2 3 4 5 6 7 8 9 10; do # the server may take a while to listen under emulation
		sleep 1
		timeout 60 "$2" -d rxe0 -x "$gid" -F -n 2000 "${@:3}" 127.0.0.1 >"$log" 2>&1 && break
		grep -q "Couldn't connect" "$log" || break
	done
	kill $srv 2>/dev/null
	wait $srv 2>/dev/null
	awk '/t_avg/ { getline; printf "%s %s", $5, $6; exit }' "$log"
}
remora_verbs() { # op; prints p50 and mean in usec, from the JSON (latency_ns of the op)
	"$B"/apps/remora verbs --backend rdma --op "$1" --size 8 --iters 8000 --warmup 0.2 \
		--pool-size 64M --json "verbs-$1.json" >"verbs-$1.log" 2>&1 || return
	awk -F'[:,]' '/"latency_ns"/ { in_lat = 1 }
		in_lat && /"avg"/ { avg = $2 } in_lat && /"p50"/ { p50 = $2 }
		in_lat && /}/ { printf "%.2f %.2f", p50 / 1000, avg / 1000; exit }' "verbs-$1.json"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }'; }

if [[ $STEPS == *,latency,* ]]; then
	[ -n "$gid" ] || missing latency "rxe0 has no RoCE v2 IPv4 GID (devinfo.txt)"
	command -v ib_read_lat >/dev/null || missing latency "perftest's ib_read_lat not installed"
fi
if [[ $STEPS == *,latency,* ]] && [ -n "$gid" ] && command -v ib_read_lat >/dev/null; then
	note ""
	note "latency per verb, usec (8 B READ/WRITE; atomics 8 B): median and mean"
	note "$(printf '%-5s %12s %12s %12s %12s %8s %8s' verb perftest-p50 perftest-avg \
		remora-p50 remora-avg p50-ratio avg-ratio)"
	for row in "read ib_read_lat -s 8" "write ib_write_lat -s 8" "faa ib_atomic_lat -A FETCH_AND_ADD" \
		"cas ib_atomic_lat -A CMP_AND_SWAP" "mcas -"; do
		set -- $row
		op=$1
		p="- -"
		[ "$2" != - ] && p=$(perftest "$op" "${@:2}")
		[ "$op" = write ] && p=$(echo "$p" | awk 'NF == 2 { printf "%.2f %.2f", 2 * $1, 2 * $2 }')
		r=$(remora_verbs "$op")
		set -- ${p:-- -} ${r:-- -}
		note "$(printf '%-5s %12s %12s %12s %12s %8s %8s' "$op" "$1" "$2" "$3" "$4" \
			"$(ratio "$3" "$1")" "$(ratio "$4" "$2")")"
		[ -n "$r" ] || { fails=$((fails + 1)); note "    remora verbs --op $op failed: see verbs-$op.log"; }
	done
	note "(write: perftest's half round trip doubled; mcas: no upstream verb, remora emulates it"
	note " with READ + CAS, counted in verbs-mcas.log)"
fi

# ---- a short bench: kvs and smallbank, ford and pandora, several MN and CN processes ----------
# Long leases: under emulation, busy-polling compute nodes starve the memory nodes' control
# plane, and a reply later than a quarter lease would get a healthy compute node fenced.
if [[ $STEPS == *,bench,* ]]; then
	note ""
	note "remora bench --backend rdma (2 memory nodes, 2 compute nodes, 2 s after 1 s warm-up)"
	for wl in "kvs --keys 20000" "smallbank --accounts 5000"; do
		for proto in ford pandora; do
			set -- $wl
			log=bench-$1-$proto.log
			t0=$SECONDS
			timeout -k 5 120 "$B"/apps/remora bench --backend rdma --workload $wl \
				--protocol $proto --mn 2 --cn 2 --threads 1 --coros 4 --pool-size 64M \
				--lease-ms 20000 --heartbeat-ms 500 \
				--duration 2 --warmup 1 --check --json "bench-$1-$proto.json" >"$log" 2>&1
			rc=$?
			st=PASS
			[ $rc = 0 ] || { st="FAIL (exit $rc)"; fails=$((fails + 1)); }
			note "bench $1 $proto: $st in $(elapsed "$t0")"
			grep -a -i -E "committed|abort rate|p50|verbs/txn|violat" "$log" | head -6 |
				sed 's/^/    /' | tee -a summary.txt
		done
	done
fi

# ---- online recovery: a compute node dies under `remora run --cn 3` (docs/recovery.md, 7) ----
# pandora, 2 memory nodes, 3 compute nodes, REMORA_BACKEND=rdma. Two ways to die:
#   kill   cn 1 is SIGKILLed from outside 1 s in, at whatever point it has reached;
#   crash  cn 1 kills itself between the WRITEs of its 2000th commit (a partly applied commit,
#          as tests/cluster/test_online.c crash_mid_commit); the survivors run 2500
#          transactions each, every one retried until it commits, so they finish only if
#          cn 1's locks on the hottest keys were stolen.
# The memory nodes see cn 1's control connection close, a survivor fences it everywhere,
# recovers its logs and publishes its failed ids; the others keep committing; --check then
# finds every record intact. The step fails unless a survivor printed "recovered here" and
# the check passed. Long leases as in the bench step.
online() { # name, remora run options before the job, job options after --check
	local name=$1 log=online-$1.log t0=$SECONDS rc st opts=$2 tail=$3
	# shellcheck disable=SC2086 # option lists
	REMORA_BACKEND=rdma timeout -k 5 240 "$B"/apps/remora run --mn 2 --cn 3 \
		--protocol pandora --pool-size 64M --lease-ms 20000 --heartbeat-ms 500 $opts \
		bench --workload kvs --check $tail >"$log" 2>&1
	rc=$?
	st=PASS
	if [ $rc != 0 ]; then
		st="FAIL (exit $rc)"
	elif ! grep -a -q "recovered here" "$log"; then
		st="FAIL (no survivor recovered cn 1)"
	elif ! grep -a -q "check  *ok" "$log"; then
		st="FAIL (the check did not pass)"
	fi
	[ "$st" = PASS ] || fails=$((fails + 1))
	note "online $name (pandora, kvs, --mn 2 --cn 3 $opts): $st in $(elapsed "$t0")"
	grep -a -E "SIGKILL|declared dead|fenced|recovered here|committed|compute nodes reported|check" \
		"$log" | head -10 | sed 's/^/    /' | tee -a summary.txt
	# a failure also shows what every node said (errors, stopped coordinators)
	[ "$st" = PASS ] || grep -a -E "^remora (cn|mn|run)" "$log" | head -30 | sed 's/^/    | /' |
		tee -a summary.txt
}
# A memory node dies (docs/recovery.md, "Memory-node failover"): pandora, SmallBank, 3 memory
# nodes, 2 replicas, memory node 1 SIGKILLed 2 s in. The verbs in flight to it fail (-EIO),
# often before the compute nodes see its control connection break at their next heartbeat;
# a failing transaction waits for that (txn_mnf_await), then counts as cut by the failover.
# They resume on the live copies and --check finds the balance conserved and no lock left. The step fails unless both compute nodes failed over and the check passed.
mnkill() {
	local log=online-mnkill.log t0=$SECONDS rc st
	REMORA_BACKEND=rdma timeout -k 5 240 "$B"/apps/remora run --mn 3 --cn 2 --replicas 2 \
		--protocol pandora --pool-size 64M --lease-ms 20000 --heartbeat-ms 500 \
		--kill mn1@2s bench --workload smallbank --accounts 5000 --check --duration 4 \
		--warmup 0 >"$log" 2>&1
	rc=$?
	st=PASS
	if [ $rc != 0 ]; then
		st="FAIL (exit $rc)"
	elif [ "$(grep -a -c "failing over to the live copies" "$log")" != 2 ]; then
		st="FAIL (not both compute nodes failed over)"
	elif ! grep -a -q "check  *ok" "$log"; then
		st="FAIL (the check did not pass)"
	fi
	[ "$st" = PASS ] || fails=$((fails + 1))
	note "memory-node failover (pandora, smallbank, --mn 3 --cn 2 --replicas 2 --kill mn1@2s): $st in $(elapsed "$t0")"
	grep -a -E "SIGKILL|failing over|committed|compute nodes reported|check" "$log" | head -8 |
		sed 's/^/    /' | tee -a summary.txt
	[ "$st" = PASS ] || grep -a -E "^remora (cn|mn|run)" "$log" | head -30 | sed 's/^/    | /' |
		tee -a summary.txt
}
if [[ $STEPS == *,online,* ]]; then
	note ""
	online kill "--kill cn1@1s" "--duration 3 --warmup 0"
	online crash "--kill cn1@crash --cn-env 1:REMORA_DIE_AT=txn.commit_mid:2000" "--txns 2500"
	mnkill
fi

# ---- verbs per transaction, shm against rdma (part of the bench step) --------------------------
# scripts/bench-compare.sh (docs/bench.md, "Comparing verb counts"): kvs and smallbank x ford and
# pandora, each a counted run (--txns) on one coordinator, once on shm and once on rdma, with one
# memory node and with two (each record on both); the per-op verb counts must be equal. rdma's
# masked-CAS emulation (READ + CAS, counted apart) is shown beside the masked-CAS count, not
# compared. The tables go into the summary.
if [[ $STEPS == *,bench,* ]]; then
	src=$(grep -o '"source": *"[^"]*"' "$B/meson-info/meson-info.json" 2>/dev/null | head -1 |
		sed 's/.*: *"//; s/"$//')
	for shape in "1:--mn 1" "2:--mn 2 --replicas 2"; do
		name=compare-mn${shape%%:*}
		note ""
		t0=$SECONDS
		if [ -f "$src/scripts/bench-compare.sh" ]; then
			# shellcheck disable=SC2086 # the shape is a list of flags
			# unlock=cas on both sides: rdma gives lock words back by CAS (its atomics are
			# not atomic against WRITEs, docs/rdma.md), shm by WRITE unless told
			REMORA_UNLOCK=cas timeout -k 5 "${RDMA_VM_COMPARE_TIMEOUT:-300}" bash "$src/scripts/bench-compare.sh" \
				-n "${RDMA_VM_COMPARE_TXNS:-200}" -o "$name" "$B/apps/remora" "--backend shm" \
				"--backend rdma" --pool-size 16M --lease-ms 20000 --heartbeat-ms 500 \
				${shape#*:} >"$name.log" 2>&1
			rc=$?
		else
			echo "scripts/bench-compare.sh not found (source dir '${src:-?}')" >"$name.log"
			rc=2
		fi
		case $rc in
		0) st=PASS ;;
		1) st="FAIL (counts differ)" ;;
		*) st="FAIL (exit $rc)" ;;
		esac
		[ $rc = 0 ] || fails=$((fails + 1))
		note "verbs per transaction, shm (A) vs rdma (B), ${shape#*:}: $st in $(elapsed "$t0")"
		if [ -f "$name/compare.txt" ]; then
			sed 's/^/    /' "$name/compare.txt" | tee -a summary.txt
		else
			tail -8 "$name.log" | sed 's/^/    /' | tee -a summary.txt
		fi
	done
fi

note ""
note "guest steps failed: $fails"
exit $((fails > 0))
