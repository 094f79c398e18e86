#!/bin/bash
# The in-guest half of two-hosts.sh: runs in each of the two guests, from the shared dir.
# usage: guest.sh a|b BUILD_DIR
#   a (10.99.0.1): memory node 0, compute node 1
#   b (10.99.0.2): memory node 1, compute node 0 (loads with --setup), merges and checks,
#                  and stops both memory nodes at the end
# The shared dir holds the config, the cluster key, the compute nodes' result lines and the
# harness's own "step done" markers; remora's files stay in each guest's own /dev/shm.
set -u
host=$1
B=$2
S=$(cd "$(dirname "$0")" && pwd)
R=$B/apps/remora
cfg=$S/c.ini
export LANG=C TERM=dumb
unset REMORA_BACKEND REMORA_CONFIG
case $host in
a) mn=0 cn=1 other=b ;;
b) mn=1 cn=0 other=a ;;
*) echo "usage: guest.sh a|b BUILD_DIR" >&2; exit 2 ;;
esac
fails=0

note() { echo "[$host] $*" | tee -a "$S/summary-$host.txt"; }
mark() { : >"$S/$1.$host"; }
await() { # step seconds: waits for the other host's marker of that step
	local i
	for ((i = 0; i < $2; i++)); do
		[ -f "$S/$1.$other" ] && return 0
		sleep 1
	done
	note "gave up waiting ${2}s for host $other to finish '$1'"
	fails=$((fails + 1))
	return 1
}
stacks() { # log: appends every remora process's threads' stacks (a step that hangs)
	local p
	for p in $(pgrep -x remora); do
		echo "== stacks of pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline")"
		if command -v gdb >/dev/null; then
			gdb -p "$p" -batch -ex "thread apply all bt" 2>&1 | grep -E '^(Thread|#)'
		else
			cat "/proc/$p/task/"*/stack 2>/dev/null
		fi
	done >>"$1" 2>&1
}
step() { # name command...: runs it, logs in the work dir, notes PASS/FAIL with the time taken
	local name=$1 t0=$SECONDS rc pid
	shift
	"$@" >"$name.log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null && ((SECONDS - t0 < 400)); do
		sleep 1
	done
	if kill -0 "$pid" 2>/dev/null; then # hung: where, then stop it as timeout(1) would
		stacks "$name.log"
		pkill -TERM -P "$pid" 2>/dev/null
		kill -TERM "$pid" 2>/dev/null
		sleep 5
		pkill -KILL -P "$pid" 2>/dev/null
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		rc=124
	else
		wait "$pid"
		rc=$?
	fi
	if [ $rc = 0 ]; then
		note "$name: PASS in $((SECONDS - t0))s"
	else
		note "$name: FAIL (exit $rc) in $((SECONDS - t0))s"
		tail -"$([ $rc = 124 ] && echo 60 || echo 5)" "$name.log" | sed 's/^/    /' |
			tee -a "$S/summary-$host.txt"
		fails=$((fails + 1))
	fi
	return $rc
}

: >"$S/summary-$host.txt"
note "host $host: rxe0 on eth0, $(ip -4 -br addr show eth0 | awk '{ print $3 }')"

# ---- memory node -------------------------------------------------------------------------
# Both hosts use the host's secret (the default key file of cluster twohosts, mode 0600).
step key install -m 600 "$S/cluster.key" /dev/shm/remora-twohosts-key
step mn$mn "$R" mn --id $mn --config "$cfg" --log "$PWD/mn$mn.log"
mark mn-up
await mn-up 300

# ---- smoke: messages in a ring across the link, verbs to both memory nodes ---------------
step smoke-cn$cn "$R" cn --id $cn --config "$cfg" smoke &&
	grep -a -o '"ring":"[a-z]*","ring_rounds":[0-9]*,"msgs_sent":[0-9]*,"msgs_recv":[0-9]*' \
		smoke-cn$cn.log | sed 's/^/    /' | tee -a "$S/summary-$host.txt"
mark smoke
await smoke 600

# ---- bench: compute node 0 loads, both run, host b merges and checks ---------------------
bench_round() { # tag protocol job-args...
	local tag=$1 proto=$2 setup=""
	shift 2
	[ $cn = 0 ] && setup=--setup
	step "$tag-cn$cn" sh -c "\"\$@\" >'$S/$tag-cn$cn.json'" sh "$R" cn --id $cn \
		--config "$cfg" --protocol "$proto" $setup bench "$@"
	mark "$tag"
	await "$tag" 600 || return
	if [ $host = b ]; then
		step "$tag-merge" "$R" merge --config "$cfg" --protocol "$proto" \
			--results "$S/$tag-cn0.json,$S/$tag-cn1.json" bench "$@" --check &&
			grep -a -i -E "committed|verbs/txn|check|balance|intact" "$tag-merge.log" |
			head -6 | sed 's/^/    /' | tee -a "$S/summary-$host.txt"
		mark "$tag-merged"
	else
		await "$tag-merged" 600
	fi
}
bench_round smallbank-pandora pandora --workload smallbank --accounts 2000 --duration 3 --warmup 1
bench_round kvs-ford ford --workload kvs --keys 5000 --duration 3 --warmup 1

# ---- stop: host b stops both memory nodes over the control plane -------------------------
mark finished
if [ $host = b ]; then
	await finished 600
	step stop-mn0 "$R" mn --id 0 --config "$cfg" --stop
	step stop-mn1 "$R" mn --id 1 --config "$cfg" --stop
	mark stopped
else
	await stopped 600
fi
for _ in 1 2 3 4 5 6 7 8 9 10; do
	pgrep -f "remora mn --id $mn" >/dev/null || break
	sleep 1
done
if pgrep -f "remora mn --id $mn" >/dev/null; then
	note "memory node $mn still runs after --stop"
	fails=$((fails + 1))
fi
note "failed steps: $fails"
exit $((fails > 0))
