#!/usr/bin/env bash
# Runs a command inside a QEMU guest that has a real RDMA stack: Debian's stock kernel with
# soft-RoCE (rdma_rxe) on a dummy interface, so no RDMA NIC is needed. The guest mounts this
# host's root read-only over 9p and WORKDIR writable, chroots into the host root and runs the
# command in WORKDIR: binaries built on the host run unchanged against the guest's rxe0.
#
# usage: scripts/rdma-vm/run.sh [-w WORKDIR] [-t SECONDS] [-m MEM] [-c CPUS]
#                               [-n LPORT:RPORT -a ADDR/LEN] [-s DIR] [-k DIR]...
#                               -- COMMAND [ARG...]
#        scripts/rdma-vm/run.sh --prepare      install, fetch and build only (no boot)
#   -w  work dir, writable in the guest (default: the current directory)
#   -t  limit for the whole VM run, boot included (default: $RDMA_VM_TIMEOUT, else 900)
#   -m  guest memory (default 3G);  -c  guest CPUs (default 2)
#   -n  give the guest a NIC (eth0) wired to one other guest: its frames go as UDP datagrams
#       from 127.0.0.1:LPORT to 127.0.0.1:RPORT (the other guest gets -n RPORT:LPORT); rxe0
#       then runs on eth0 with address -a (e.g. 10.99.0.1/24) instead of on a dummy interface
#   -s  one more host directory, writable, mounted at the same path in the guest
#   -k  a host directory under /tmp or /run that the guest must see (read-only, at its path)
#       in spite of its own tmpfs there, e.g. a build dir; the source tree is always kept
# Exit status: the command's; 77 when the VM cannot run on this machine (reason printed);
# 124 when the time limit hit; 97/98 when the guest could not set up rxe0 or the 9p mounts;
# 99 when the guest died without reporting a status.
#
# The guest runs under TCG (software emulation, ~20x slower than the host): KVM here may be
# unusable for a stock kernel (e.g. nested PVM), and TCG works everywhere. Build on the host,
# run in the guest. Needs root or sudo to install missing Debian packages: qemu-system-x86
# kmod busybox-static cpio rdma-core ibverbs-utils ibverbs-providers perftest iproute2.
# Kernel and initramfs are cached in $REMORA_VM_CACHE (default ~/.cache/remora-rdma-vm).
# Extra guest setup, from the environment: VM_EXTRA_MODULES (space-separated kernel modules,
# loaded after the default ones, e.g. "nd_e820 nd_pmem ext4"; another module set gets its own
# cached initramfs) and VM_APPEND (more kernel arguments, e.g. "memmap=512M!1G").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${REMORA_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/remora-rdma-vm}
PACKAGES=(qemu-system-x86 kmod busybox-static cpio rdma-core ibverbs-utils ibverbs-providers
	perftest iproute2 gdb)
# Kernel modules for the guest, loaded in dependency order (modprobe --show-depends).
MODULES=(crc32_generic crc32-pclmul rdma_rxe rdma_ucm dummy virtio_pci 9pnet_virtio 9p virtio_net)
read -r -a extra_modules <<<"${VM_EXTRA_MODULES:-}"
MODULES+=("${extra_modules[@]}")
# The default set keeps the plain name; another set gets a file of its own (no rebuild ping-pong).
initrd_name=initramfs
((${#extra_modules[@]} == 0)) ||
	initrd_name=initramfs-$(echo "${MODULES[*]}" | sha256sum | cut -c1-8)

log() { echo "rdma-vm: $*" >&2; }
skip() {
	echo "rdma-vm: SKIP: $*" >&2
	exit 77
}
usage() {
	sed -n '7,23p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

workdir=$PWD
limit=${RDMA_VM_TIMEOUT:-900}
mem=3G
cpus=2
prepare_only=0
net=""
net_addr=""
share=""
keep=$(cd "$here/../.." && pwd)
while (($#)); do
	case $1 in
	-w) workdir=$2; shift 2 ;;
	-t) limit=$2; shift 2 ;;
	-m) mem=$2; shift 2 ;;
	-c) cpus=$2; shift 2 ;;
	-n) net=$2; shift 2 ;;
	-a) net_addr=$2; shift 2 ;;
	-s) share=$2; shift 2 ;;
	-k) keep+=":$(realpath -m "$2")"; shift 2 ;;
	--prepare) prepare_only=1; shift ;;
	--) shift; break ;;
	-h | --help) usage ;;
	*) break ;;
	esac
done
if ((!prepare_only && $# == 0)); then
	usage
fi
if [ -n "$net" ] && ! [[ $net =~ ^[0-9]+:[0-9]+$ ]]; then
	log "-n $net: want LPORT:RPORT (two UDP ports on 127.0.0.1)"
	exit 2
fi
if [ -n "$net" ] && ! [[ $net_addr =~ ^[0-9]+\.[0-9]+\.[0-9]+\.([0-9]+)/[0-9]+$ ]]; then
	log "-n needs -a ADDR/LEN (an IPv4 address with its prefix length), got '$net_addr'"
	exit 2
fi
mac_byte=01
[ -z "$net" ] || mac_byte=$(printf %02x "$(( $(echo "${net_addr%%/*}" | cut -d. -f4) & 255 ))")

# ---- can this machine run it? --------------------------------------------------------------

host_checks() {
	[ "$(uname -m)" = x86_64 ] || skip "needs an x86-64 host (this is $(uname -m))"
	[ "$(uname -s)" = Linux ] || skip "needs Linux"
	command -v dpkg-query >/dev/null && command -v apt-get >/dev/null ||
		skip "needs a Debian-like host (apt-get, dpkg) to fetch the guest kernel"
}

install_packages() {
	local missing=() p sudo=""

	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	((${#missing[@]})) || return 0
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null && sudo -n true 2>/dev/null ||
			skip "packages missing (${missing[*]}) and no root or password-less sudo"
		sudo=sudo
	fi
	log "installing ${missing[*]}"
	$sudo apt-get update -qq >/dev/null 2>&1 || true
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >/dev/null 2>&1 || skip "apt-get install ${missing[*]} failed"
}

# ---- guest kernel: Debian's linux-image, downloaded and unpacked, never installed ----------

fetch_kernel() {
	local pkg kdir=$cache/kernel

	if [ -f "$kdir/version" ] && [ -f "$kdir/root/boot/vmlinuz-$(cat "$kdir/version")" ]; then
		return 0
	fi
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
		awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
	[ -n "$pkg" ] || skip "apt-cache knows no linux-image-amd64 (apt sources without main?)"
	log "downloading $pkg"
	rm -rf "$kdir" && mkdir -p "$kdir/deb"
	(cd "$kdir/deb" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
		skip "apt-get download $pkg failed (offline?)"
	dpkg-deb -x "$kdir"/deb/*.deb "$kdir/root"
	rm -rf "$kdir/deb"
	ls "$kdir/root/lib/modules" | head -1 >"$kdir/version"
	depmod -b "$kdir/root" "$(cat "$kdir/version")"
}

# ---- initramfs: busybox, rdma and ip with their libraries, the modules, our /init ----------

build_initramfs() {
	local kdir=$cache/kernel kver r stamp bb f b lib m
	kver=$(cat "$kdir/version")
	stamp=$( (cat "$here/init" "$0"; echo "${MODULES[*]}") | sha256sum | cut -c1-16)-$kver
	if [ -f "$cache/$initrd_name.cpio" ] &&
		[ "$(cat "$cache/$initrd_name.stamp" 2>/dev/null)" = "$stamp" ]; then
		return 0
	fi
	log "building the initramfs"
	r=$cache/$initrd_name.tree
	rm -rf "$r"
	mkdir -p "$r"/{bin,sbin,etc,proc,sys,dev,tmp,host,lib/modules}
	bb=$(command -v busybox) || skip "busybox not found"
	cp "$bb" "$r/bin/busybox"
	for f in $("$r/bin/busybox" --list); do
		[ -e "$r/bin/$f" ] || ln -s busybox "$r/bin/$f"
	done
	for f in /usr/bin/rdma /usr/sbin/ip; do
		mkdir -p "$r$(dirname "$f")"
		cp "$f" "$r$f"
		for lib in $(ldd "$f" | awk '/=>/ { print $3 } /ld-linux/ { print $1 }'); do
			mkdir -p "$r$(dirname "$lib")"
			cp -L "$lib" "$r$lib"
		done
	done
	: >"$r/etc/modorder"
	for m in "${MODULES[@]}"; do
		for f in $(modprobe -d "$kdir/root" -S "$kver" --show-depends "$m" 2>/dev/null |
			awk '$1 == "insmod" { print $2 }'); do
			b=$(basename "$f")
			[ -e "$r/lib/modules/$b" ] && continue
			cp "$f" "$r/lib/modules/$b"
			echo "$b" >>"$r/etc/modorder"
		done
	done
	grep -q rdma_rxe "$r/etc/modorder" || skip "the guest kernel $kver has no rdma_rxe module"
	for m in "${extra_modules[@]}"; do
		modprobe -d "$kdir/root" -S "$kver" --show-depends "$m" >/dev/null 2>&1 ||
			skip "the guest kernel $kver has no module $m (VM_EXTRA_MODULES)"
	done
	install -m 755 "$here/init" "$r/init"
	(cd "$r" && find . | cpio -o -H newc --quiet) >"$cache/$initrd_name.cpio"
	echo "$stamp" >"$cache/$initrd_name.stamp"
	rm -rf "$r"
}

# ---- boot ------------------------------------------------------------------------------------

boot() {
	local kver state=$workdir/.rdma-vm rc

	local nic=(-nic none) mounts=() append=""
	kver=$(cat "$cache/kernel/version")
	if [ -n "$net" ]; then
		# UDP, not QEMU's TCP socket netdev: over TCP, Nagle and delayed ACKs add ~40 ms
		# to each round trip. The MAC comes from the address's last byte, so the two differ.
		nic=(-netdev "socket,id=n0,localaddr=127.0.0.1:${net%%:*},udp=127.0.0.1:${net#*:}"
			-device "virtio-net-pci,netdev=n0,mac=52:54:00:52:4d:$mac_byte")
		append+=" remora.ip=$net_addr"
	fi
	if [ -n "$share" ]; then
		mounts=(-virtfs "local,path=$share,mount_tag=share,security_model=none")
		append+=" remora.share=$share"
	fi
	mkdir -p "$state"
	rm -f "$state/rc"
	printf '%q ' "$@" >"$state/cmd.sh"
	echo >>"$state/cmd.sh"
	log "booting (TCG, $cpus CPUs, $mem, limit ${limit}s${VM_APPEND:+, $VM_APPEND}): $*"
	set +e
	timeout --kill-after=10 "$limit" qemu-system-x86_64 \
		-accel tcg,thread=multi -cpu max -smp "$cpus" -m "$mem" \
		-nographic -no-reboot "${nic[@]}" \
		-kernel "$cache/kernel/root/boot/vmlinuz-$kver" -initrd "$cache/$initrd_name.cpio" \
		-append "console=ttyS0 panic=-1 quiet remora.workdir=$workdir remora.keep=$keep$append${VM_APPEND:+ $VM_APPEND}" \
		-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
		-virtfs "local,path=$workdir,mount_tag=work,security_model=none" "${mounts[@]}" \
		</dev/null 2>&1 | tr -d '\r' | tee "$state/console.log"
	rc=${PIPESTATUS[0]}
	set -e
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		log "time limit of ${limit}s hit"
		exit 124
	fi
	if [ -f "$state/rc" ]; then
		exit "$(cat "$state/rc")"
	fi
	rc=$(sed -n 's/^GUEST_RC=\([0-9]*\).*/\1/p' "$state/console.log" | tail -1)
	exit "${rc:-99}"
}

host_checks
case $workdir in
*[[:space:]]* | *[\'\"\\]*) log "work dir '$workdir': no spaces or quotes, please"; exit 2 ;;
esac
workdir=$(realpath "$workdir")
if [ -n "$share" ]; then
	case $share in *[[:space:]]* | *[\'\"\\]*) log "share dir '$share': no spaces or quotes, please"; exit 2 ;; esac
	share=$(realpath "$share")
	[ -d "$share" ] && [ -w "$share" ] || { log "share dir $share is not a writable directory"; exit 2; }
fi
[ -d "$workdir" ] && [ -w "$workdir" ] || { log "work dir $workdir is not a writable directory"; exit 2; }
case $keep in *[[:space:]]* | *[\'\"\\]*) log "kept dirs '$keep': no spaces or quotes, please"; exit 2 ;; esac
install_packages
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not available"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9 # one preparation at a time; boots themselves may run side by side
fetch_kernel
build_initramfs
flock -u 9
((prepare_only)) && exit 0
boot "$@"
