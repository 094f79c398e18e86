#!/bin/bash
# The in-guest half of pmem-crash.sh (runs inside the guest, in the output dir).
# usage: pmem-guest.sh BUILD_DIR ITERS
# Writes one log per configuration and summary.txt; exit status 0 when every one passed.
set -u
B=$1
ITERS=$2
M=/tmp/pmem
fails=0

note() { echo "$*" | tee -a summary.txt; }
: >summary.txt

if [ ! -b /dev/pmem0 ]; then
	note "no /dev/pmem0 (memmap= or nd_pmem did not take): $(dmesg | grep -i -m2 'pmem\|e820')"
	exit 1
fi
mkdir -p $M
if ! mkfs.ext4 -q -F /dev/pmem0 || ! mount -o dax=always /dev/pmem0 $M; then
	note "mkfs.ext4 or mount -o dax=always of /dev/pmem0 failed"
	exit 1
fi
opts=$(awk -v m=$M '$2 == m { print $3 " " $4 }' /proc/mounts)
note "pmem: /dev/pmem0 $(($(blockdev --getsize64 /dev/pmem0) >> 20)) MiB on $M ($opts), kernel $(uname -r)"
case $opts in *dax=always*) ;; *) note "the mount is not dax=always"; exit 1 ;; esac

export LANG=C TERM=dumb REMORA_PROFILE=none
export REMORA_BIN=$B/apps/remora REMORA_CRASH_WL=$B/tests/recovery_crash_wl
export REMORA_MEDIUM_LIB=$B/tests/libremora_medium.so
export REMORA_CRASH_DIR=$M REMORA_CRASH_POWER=0 REMORA_CRASH_ITERS=$ITERS
for wl in smallbank insdel; do
	t0=$SECONDS
	timeout -k 5 240 "$B"/tests/recovery_crash $wl pandora >crash-$wl.log 2>&1
	rc=$?
	st=PASS
	[ $rc = 0 ] || { st="FAIL (exit $rc)"; fails=$((fails + 1)); }
	note "crash $wl pandora, $ITERS iterations on DAX: $st in $((SECONDS - t0))s"
	grep -a -E "^(crash|iter|seed|recover|outcome|total)|crash at|recovered|PASS|FAIL" \
		crash-$wl.log | tail -8 | sed 's/^/    /' | tee -a summary.txt
done
umount $M
note "failed: $fails"
exit $((fails > 0))
