#!/usr/bin/env bash
# Runs one remora cluster across two hosts with soft-RoCE between them, without any RDMA NIC:
# two QEMU guests (run.sh) wired by a virtual Ethernet link, each with rxe0 on its eth0.
#
#   host A, 10.99.0.1: remora mn --id 0, remora cn --id 1
#   host B, 10.99.0.2: remora mn --id 1, remora cn --id 0 (loads the database), remora merge
#
# Both read one cluster config (c.ini, written here). Every compute node reaches one memory
# node on its own host and one across the link, and the two compute nodes exchange messages
# across it. The phases: the smoke job (messages in a ring, verbs to every memory node), then
# `remora bench` of smallbank with pandora and of kvs with ford, each merged and checked.
# The guests share one directory with this script; the harness passes its own files there
# (config, cluster key, results, "phase done" markers); remora itself uses no shared file.
#
# usage: scripts/rdma-vm/two-hosts.sh [BUILD_DIR]      (default: build-rdma-vm in the tree)
# Results: BUILD_DIR/two-hosts/summary.txt, the guests' logs under BUILD_DIR/two-hosts/.
# Exit status: 0 every phase passed on both hosts, 1 a phase failed, 77 the guests cannot run
# here, 124 a guest hit its time limit (RDMA_VM_TIMEOUT, default 900 s).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(realpath -m "${1:-$src/build-rdma-vm}")
limit=${RDMA_VM_TIMEOUT:-900}

"$here/run.sh" --prepare || exit $?
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$src" -Drdma=enabled >/dev/null ||
		{ echo "two-hosts: meson setup failed (libibverbs-dev/librdmacm-dev?)" >&2; exit 1; }
fi
ninja -C "$build" >/dev/null || { echo "two-hosts: build failed" >&2; exit 1; }

out=$build/two-hosts
rm -rf "$out"
mkdir -p "$out/a" "$out/b" "$out/share"
cp "$here/two-hosts-guest.sh" "$out/share/guest.sh"
# The cluster secret, one for both hosts: each guest installs it as its key file (mode 0600)
# before starting anything, so that neither memory node creates a secret of its own.
(umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; echo) >"$out/share/cluster.key"
cat >"$out/share/c.ini" <<'EOF'
; one cluster on two hosts: a memory node and a compute node on each
[cluster]
cluster      = twohosts
backend      = rdma
pool_size    = 64M
threads      = 1
coros        = 4
; emulated guests: busy-polling compute nodes delay the control plane by up to seconds
lease_ms     = 30000
heartbeat_ms = 500
connect_ms   = 120000
; TCG guests starve soft-RoCE for longer than the default 67 ms x 7 tries: 2.1 s per try
rdma_qp_timeout = 19
; a batch that completes nothing for 60 s (4 x the 7 ACK tries above) breaks its channel with
; one line naming the node, the verb, the QP's state and what its flush showed (docs/rdma.md)
verb_timeout_ms = 60000

[mn.0]
host = 10.99.0.1
port = 7100
[mn.1]
host = 10.99.0.2
port = 7100

[cn.0]
host = 10.99.0.2
[cn.1]
host = 10.99.0.1
EOF

# Two UDP ports on 127.0.0.1 carry the link's frames; a random pair keeps parallel runs apart.
pa=$((20000 + RANDOM % 20000))
pb=$((pa + 1))
vm() { # name addr lport rport
	RDMA_VM_TIMEOUT=$limit "$here/run.sh" -w "$out/$1" -s "$out/share" -k "$build" -c 1 -m 2G \
		-n "$3:$4" -a "$2/24" -- /bin/bash "$out/share/guest.sh" "$1" "$build" \
		>"$out/console-$1.txt" 2>&1
}
set +e
vm a 10.99.0.1 "$pa" "$pb" &
pid_a=$!
vm b 10.99.0.2 "$pb" "$pa"
rc_b=$?
wait "$pid_a"
rc_a=$?
set -e

: >"$out/summary.txt"
for h in a b; do
	[ -f "$out/share/summary-$h.txt" ] && cat "$out/share/summary-$h.txt" >>"$out/summary.txt"
done
echo "== two-hosts summary ($out/summary.txt)"
cat "$out/summary.txt"
echo "host a: exit $rc_a, host b: exit $rc_b (consoles: $out/console-{a,b}.txt)"
for rc in "$rc_a" "$rc_b"; do
	case $rc in 0) ;; 77 | 124) exit "$rc" ;; *) exit 1 ;; esac
done
echo "two-hosts: all passed"
