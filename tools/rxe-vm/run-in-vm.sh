#!/usr/bin/env bash
# run-in-vm.sh - run a command inside a throw-away qemu (TCG) VM that has a
# real Soft-RoCE device (rdma_rxe "rxe0") and the HOST's userland.
#
# rdmablk's copy (tools/rxe-vm/README.md): tools/test-rxe runs the verbs tests through it.
# Needs qemu-system-x86 busybox-static cpio kmod (and apt-get for the kernel package, once).
# Costs ~12 s to boot + ~12 s of guest setup under TCG (no KVM needed), ~30 s per start.
#
#   run-in-vm.sh [--prepare] [--] [cmd [args...]]      (default cmd: ibv_devinfo -d rxe0)
#
# Guest: Debian kernel (package $RXE_VM_KPKG, cached in $RXE_VM_DIR) + a tiny
# busybox initramfs that mounts the host's / read-only over virtio-9p, puts a
# tmpfs overlay on top (so the guest root is writable, changes are discarded),
# and switch_roots into it.  The host's current directory (and every dir listed in
# RXE_VM_RW, colon-separated) is mounted READ-WRITE at the same path, so build
# outputs/results written there come back.  The guest creates a dummy netdev
# "eth0" with $RXE_VM_IP/24 and binds rxe0 to it.  The command runs as root in
# $PWD with the caller's exported environment; its stdout/stderr are streamed
# back separately (virtio-serial), and its exit status becomes ours.
# Exit codes: the command's, 124 = timeout, 125 = VM/setup failure, 2 = the requested kernel
# package cannot be used (never another kernel instead: no fallback).
#
# Env: RXE_VM_DIR (/tmp/rxe-vm) RXE_VM_KPKG (linux-image-6.1.0-56-amd64; e.g.
#        linux-image-6.12.95+deb12-amd64 for NVMe in-band auth, fetched from
#        bookworm-backports through a private apt state in $RXE_VM_DIR/apt; a package that
#        cannot be downloaded or unpacked is an error, exit 2)
#      RXE_VM_KDEB (use this .deb instead of apt-get download; its Package must be
#        RXE_VM_KPKG, or the default above)
#      RXE_VM_KREL (a file: each VM start appends the guest's `uname -r` to it, one line,
#        "unknown" when the guest did not get as far as reporting it)
#      RXE_VM_TIMEOUT (900 s, whole VM) RXE_VM_MEM (2048 MiB) RXE_VM_SMP (2)
#      RXE_VM_IP (10.0.2.15) RXE_VM_MTU (1500) RXE_VM_MODULES (extra modules)
#      RXE_VM_RW (extra writable dirs) RXE_VM_VERBOSE=1 (console + timings)
#      RXE_VM_KEEP=1 (keep the per-run dir with console.log)
#      RXE_VM_DISK (a raw image file attached as a virtio disk, the guest's /dev/vda after
#        `modprobe virtio_blk`: a scratch file system that takes O_DIRECT, unlike 9p/tmpfs)
#      (several: colon-separated, /dev/vda, /dev/vdb, ...); RXE_VM_DISK_CACHE (qemu's cache
#        mode for them: unsafe; tools/powercut uses none, so what the guest wrote is on the
#        host at once and only the guest's own memory dies with it)
#      RXE_VM_PIDFILE (qemu writes its pid there: tools/powercut kills the whole VM)
#      RXE_VM_NVME (a raw image file attached as an emulated NVMe drive, QEMU's `-device nvme`
#        with one namespace: the guest's /dev/nvme0n1 and /dev/ng0n1 after `modprobe nvme`;
#        several: colon-separated; same cache mode as RXE_VM_DISK)
#      RXE_VM_APPEND (more kernel command line, e.g. nvme.poll_queues=2)
#      RXE_VM_ROOT (a directory holding another root file system, e.g. the Debian 13 one
#        tools/rxe-vm/trixie-root.sh builds: the guest's / instead of this machine's, under
#        the same tmpfs overlay; the current directory and RXE_VM_RW are still shared, so the
#        checkout and its build/ binaries run there against that root's libraries)
# cargo: [target.x86_64-unknown-linux-gnu] runner = "/path/to/run-in-vm.sh" in
# .cargo/config.toml makes `cargo test` run each test binary in a fresh VM.
set -euo pipefail

VMDIR=${RXE_VM_DIR:-/tmp/rxe-vm}
KPKG=${RXE_VM_KPKG:-linux-image-6.1.0-56-amd64}
TIMEOUT=${RXE_VM_TIMEOUT:-900}
MEM=${RXE_VM_MEM:-2048}
SMP=${RXE_VM_SMP:-2}
VERBOSE=${RXE_VM_VERBOSE:-0}
GUEST_ROOT=${RXE_VM_ROOT:-/}
# modules the initramfs needs before it can reach the host's root
BOOT_MODS="virtio_pci 9pnet_virtio 9p overlay virtio_console"
# the default kernel keeps the historical $VMDIR/kroot; others get their own tree
DEFAULT_KPKG=linux-image-6.1.0-56-amd64
if [ "$KPKG" = "$DEFAULT_KPKG" ]; then KROOT=$VMDIR/kroot; else KROOT=$VMDIR/kroot-$KPKG; fi

die() { echo "rxe-vm: error: $*" >&2; exit 125; }
# the requested kernel cannot be used: exit 2, and no other kernel is tried
refuse() { echo "rxe-vm: error: $*" >&2; exit 2; }
log() { [ "$VERBOSE" = 1 ] && echo "rxe-vm: $*" >&2 || true; }

for t in qemu-system-x86_64 dpkg-deb depmod cpio gzip xz flock timeout; do
  command -v "$t" >/dev/null || die "'$t' not found (apt-get install qemu-system-x86 cpio kmod dpkg xz-utils coreutils util-linux)"
done
BUSYBOX=$(command -v busybox || true)
[ -n "$BUSYBOX" ] && ! ldd "$BUSYBOX" >/dev/null 2>&1 || die "need a static busybox (apt-get install busybox-static)"

PREPARE_ONLY=0
[ "${1:-}" = --prepare ] && { PREPARE_ONLY=1; shift; }
[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] || set -- ibv_devinfo -d rxe0
[ -x "$GUEST_ROOT/bin/bash" ] ||
  die "RXE_VM_ROOT=$GUEST_ROOT has no bin/bash: not a root file system (tools/rxe-vm/trixie-root.sh builds one)"

mkdir -p "$VMDIR"
exec 9>"$VMDIR/.lock"

# ---------------------------------------------------------------- kernel
# apt-get download from bookworm-backports (trixie-backports for a Debian 13 kernel, "+deb13"
# in its name, e.g. linux-image-6.16.12+deb13-amd64) without touching the host's apt sources:
# a private sources.list/lists/cache under $VMDIR/apt (or apt-trixie; updated once).
backports_download() {
  local suite=bookworm-backports a="$VMDIR/apt"
  case $1 in *+deb13-*) suite=trixie-backports a="$VMDIR/apt-trixie" ;; esac
  mkdir -p "$a/lists/partial" "$a/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
    "http://deb.debian.org/debian $suite main" > "$a/sources.list"
  local o=(-o "Dir::Etc::SourceList=$a/sources.list" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$a/lists" -o "Dir::Cache=$a/cache")
  ls "$a/lists/"*Packages* >/dev/null 2>&1 || apt-get "${o[@]}" update >&2 || return 1
  (cd "$VMDIR" && apt-get "${o[@]}" download "$1" >&2)
}

# kernel_deb PKG: the path of PKG's .deb in $VMDIR, downloaded there first if it is not
kernel_deb() {
  local deb
  deb=$(ls "$VMDIR"/"$1"_*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    echo "rxe-vm: downloading $1 ..." >&2
    (cd "$VMDIR" && apt-get download "$1" >&2) || backports_download "$1" ||
      refuse "cannot download $1 (apt-get download, and from the backports suite); no" \
             "other kernel is used instead: run apt-get update, put the .deb in $VMDIR, set" \
             "RXE_VM_KDEB to it, or name another package in RXE_VM_KPKG"
    deb=$(ls "$VMDIR"/"$1"_*.deb 2>/dev/null | head -1 || true)
    [ -n "$deb" ] || refuse "apt-get download $1 left no ${1}_*.deb in $VMDIR"
  fi
  echo "$deb"
}

# The tree of $KPKG in $KROOT ($KROOT/.ok names the package it was unpacked from: a tree of
# another package, e.g. one an older copy of this script fell back to, is unpacked again).
prepare_kernel() {
  [ -f "$KROOT/.ok" ] && [ "$(cat "$KROOT/.ok")" = "$KPKG" ] && return 0
  local deb=${RXE_VM_KDEB:-} pkg part
  [ -n "$deb" ] || deb=$(kernel_deb "$KPKG")
  [ -f "$deb" ] || refuse "no kernel package file $deb (RXE_VM_KDEB)"
  pkg=$(dpkg-deb -f "$deb" Package 2>/dev/null) || refuse "$deb is not a .deb"
  [ "$pkg" = "$KPKG" ] ||
    refuse "$deb is $pkg, not the requested $KPKG (set RXE_VM_KPKG=$pkg to use it)"
  rm -rf "$KROOT"
  dpkg-deb -x "$deb" "$KROOT" || refuse "cannot extract $deb"
  # Debian's 7.x kernels: linux-image-VERSION holds neither kernel nor modules but depends on
  # linux-binary-VERSION (the kernel), linux-modules-VERSION and linux-base-VERSION (the
  # config, modules.builtin, modules.order), which are unpacked with it
  for part in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' |
                sed -n 's/^ *\(linux-\(binary\|modules\|base\)-[^ ]*\).*/\1/p'); do
    dpkg-deb -x "$(kernel_deb "$part")" "$KROOT" || refuse "cannot extract $part (for $KPKG)"
  done
  # Debian 13 (merged /usr) ships the modules under usr/lib/modules
  if [ ! -d "$KROOT/lib/modules" ] && [ -d "$KROOT/usr/lib/modules" ]; then
    mkdir -p "$KROOT/lib" && mv "$KROOT/usr/lib/modules" "$KROOT/lib/modules"
  fi
  local kver; kver=$(ls "$KROOT/lib/modules" 2>/dev/null | head -1)
  # ... and their kernel as lib/modules/VERSION/vmlinuz
  if [ -n "$kver" ] && [ -f "$KROOT/lib/modules/$kver/vmlinuz" ]; then
    mkdir -p "$KROOT/boot" && mv "$KROOT/lib/modules/$kver/vmlinuz" "$KROOT/boot/vmlinuz-$kver"
  fi
  [ -n "$kver" ] && [ -f "$KROOT/boot/vmlinuz-$kver" ] ||
    refuse "$deb has no lib/modules/VERSION (or usr/lib/modules) with a boot/vmlinuz-VERSION"
  depmod -b "$KROOT" "$kver" || die "depmod failed"
  echo "$KPKG" > "$KROOT/.ok"
}

# ordered (deps first) list of module paths for the given module names
mod_paths() {
  local dep="$KROOT/lib/modules/$KVER/modules.dep" m line seen=" " p
  local builtin="$KROOT/lib/modules/$KVER/modules.builtin"
  for m in "$@"; do
    # built into this kernel (e.g. virtio_pci in Debian's 6.12): nothing to load
    grep -qE "(^|/)${m//_/[-_]}\.ko$" "$builtin" 2>/dev/null && continue
    line=$(grep -E "(^|/)${m//_/[-_]}\.ko(\.xz|\.zst)?:" "$dep") || die "module $m not in $KPKG"
    for p in $(echo "${line#*:}" | tr ' ' '\n' | tac) "${line%%:*}"; do
      case "$seen" in *" $p "*) ;; *) seen="$seen$p "; echo "$p";; esac
    done
  done
}

# ---------------------------------------------------------------- initramfs
INIT_SCRIPT='#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
halt_vm() { echo "rxe-vm-init: $*"; [ -d /ctl ] && echo "$*" > /ctl/error; sync; poweroff -f; sleep 5; }
for m in $(cat /modules.list); do insmod /lib/modules/$m || halt_vm "insmod $m failed"; done
O=trans=virtio,version=9p2000.L,msize=262144
mkdir -p /ctl /lower /rw /newroot
mount -t 9p -o $O,cache=mmap ctl /ctl || halt_vm "cannot mount 9p ctl share"
mount -t 9p -o $O,ro,cache=loose hostroot /lower || halt_vm "cannot mount 9p host root"
mount -t tmpfs -o mode=755 rw /rw && mkdir -p /rw/upper /rw/work
if ! mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot; then
  echo "rxe-vm-init: overlay failed, using read-only root"; mount --bind /lower /newroot
fi
mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys; mount -t devtmpfs dev /newroot/dev
mount -t tmpfs -o mode=755 run /newroot/run && mkdir -p /newroot/run/rxe-vm
mount --move /ctl /newroot/run/rxe-vm
mkdir -p /newroot/lib/modules
mount -t 9p -o $O,ro,cache=loose kmods /newroot/lib/modules || halt_vm "cannot mount kernel modules share"
umount /proc /sys; umount -l /dev
# switch_root (not chroot): kernel usermode helpers (request_module -> modprobe)
# must see the real root, e.g. rdma_rxe needs crc32 loaded on demand.
exec switch_root /newroot /bin/bash /run/rxe-vm/guest.sh
'

prepare_initramfs() {
  local img="$VMDIR/initramfs-$KVER.cpio.gz" sum
  sum=$( { echo "$INIT_SCRIPT"; echo "$BOOT_MODS"; } | md5sum | cut -c1-32)
  [ -f "$img" ] && [ "$(cat "$img.sum" 2>/dev/null)" = "$sum" ] && return 0
  local d="$VMDIR/initramfs.d" p
  rm -rf "$d"; mkdir -p "$d"/{bin,proc,sys,dev,lib/modules}
  cp "$BUSYBOX" "$d/bin/busybox"
  printf '%s' "$INIT_SCRIPT" > "$d/init"; chmod 755 "$d/init"
  # busybox insmod takes plain .ko only: compressed modules (6.x kernels) are unpacked here
  mod_paths $BOOT_MODS > "$d/modules.src"
  while read -r p; do
    mkdir -p "$d/lib/modules/$(dirname "$p")"
    case "$p" in
      *.xz) xz -dc "$KROOT/lib/modules/$KVER/$p" > "$d/lib/modules/${p%.xz}"; echo "${p%.xz}" ;;
      *.zst) zstd -qdc "$KROOT/lib/modules/$KVER/$p" > "$d/lib/modules/${p%.zst}"
             echo "${p%.zst}" ;;
      *) cp "$KROOT/lib/modules/$KVER/$p" "$d/lib/modules/$p"; echo "$p" ;;
    esac
  done < "$d/modules.src" > "$d/modules.list"
  rm "$d/modules.src"
  (cd "$d" && find . | cpio -o -H newc --quiet | gzip -1) > "$img.tmp" || die "cpio failed"
  mv "$img.tmp" "$img"; echo "$sum" > "$img.sum"
}

flock 9
prepare_kernel
KVER=$(ls "$KROOT/lib/modules" | head -1)
prepare_initramfs
flock -u 9
[ $PREPARE_ONLY = 1 ] && { echo "rxe-vm: prepared $VMDIR (kernel $KVER)" >&2; exit 0; }

# ---------------------------------------------------------------- per-run dir
RUN=$(mktemp -d "$VMDIR/run.XXXXXX")
QPID=
cleanup() {
  [ -n "$QPID" ] && kill "$QPID" 2>/dev/null || true
  [ "${RXE_VM_KEEP:-0}" = 1 ] && echo "rxe-vm: kept $RUN" >&2 || rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

CWD=$(pwd -P)
# writable shares: cwd + RXE_VM_RW
SHARES=()
add_share() { local p; p=$(cd "$1" 2>/dev/null && pwd -P) || die "RXE_VM_RW: no dir $1"
  [ "$p" = / ] && die "refusing to share / read-write"; SHARES+=("$p"); }
[ "$CWD" != / ] && add_share "$CWD"
IFS=: read -r -a _rw <<< "${RXE_VM_RW:-}"; for p in "${_rw[@]}"; do [ -n "$p" ] && add_share "$p"; done

{ # environment: every exported variable except host-specific ones
  for v in $(compgen -e); do
    case $v in PWD|OLDPWD|SHLVL|_|HOSTNAME|BASH*|SHELLOPTS|PPID|UID|EUID|TMPDIR|XDG_RUNTIME_DIR|SSH_*|DISPLAY) continue;; esac
    printf 'export %s=%q\n' "$v" "${!v}"
  done
  printf 'RXE_CWD=%q\n' "$CWD"
  printf 'RXE_IP=%q RXE_MTU=%q RXE_VERBOSE=%q\n' "${RXE_VM_IP:-10.0.2.15}" "${RXE_VM_MTU:-1500}" "$VERBOSE"
  printf 'RXE_MODULES=%q\n' "${RXE_VM_MODULES:-}"
  printf 'RXE_KVER=%q\n' "$KVER"
  SH_PATHS=("${SHARES[@]}"); declare -p SH_PATHS
  ARGS=("$@"); declare -p ARGS
} > "$RUN/env.sh"

cat > "$RUN/guest.sh" <<'GUEST'
# runs inside the guest as PID 1, root = host's / (9p, ro) + tmpfs overlay
exec 2>/dev/console  # until the command runs, errors go to the serial log
# PID 1 must not exit (kernel panic); wait with a builtin, 9p vanishes during power-off
poweroff() { sync; echo o > /proc/sysrq-trigger; read -r -t 60 -u 7; }
t0=$(cut -d' ' -f1 /proc/uptime)
uname -r > /run/rxe-vm/krel  # the host appends it to $RXE_VM_KREL
source /run/rxe-vm/env.sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
fail() { echo "$*" > /run/rxe-vm/error; echo "rxe-vm-guest: $*" >&2; poweroff; }
O=trans=virtio,version=9p2000.L,msize=262144
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts; mount -t tmpfs shm /dev/shm
mount -t tmpfs -o mode=1777 tmp /tmp; mount -t tmpfs -o mode=1777 vartmp /var/tmp
mkfifo /run/.hold && exec 7<>/run/.hold
i=0; for p in "${SH_PATHS[@]}"; do
  mkdir -p "$p"  # may be hidden by the guest's own tmpfs /tmp
  mount -t 9p -o $O,cache=mmap "rw$i" "$p" || fail "cannot mount writable share $p"; i=$((i+1)); done
modprobe configfs && mount -t configfs configfs /sys/kernel/config
hostname rxevm; ip link set lo up
modprobe dummy numdummies=0 || fail "modprobe dummy"
ip link add eth0 type dummy && ip link set eth0 mtu "$RXE_MTU" up &&
  ip addr add "$RXE_IP/24" dev eth0 || fail "cannot configure eth0"
for m in rdma_rxe ib_uverbs rdma_ucm $RXE_MODULES; do modprobe "$m" || fail "modprobe $m failed"; done
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 failed"
for n in $(seq 100); do
  grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && break; sleep 0.1; done
grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state || fail "rxe0 port not ACTIVE"
ulimit -l unlimited
out=/dev/console err=/dev/console
for p in /sys/class/virtio-ports/*; do
  case $(cat "$p/name") in stdout) out=/dev/${p##*/};; stderr) err=/dev/${p##*/};; esac; done
t1=$(cut -d' ' -f1 /proc/uptime)
cd "$RXE_CWD" || fail "cannot cd to $RXE_CWD"
"${ARGS[@]}" </dev/null >"$out" 2>"$err"; rc=$?
t2=$(cut -d' ' -f1 /proc/uptime)
echo "boot=${t0}s setup=$(awk "BEGIN{print $t1-$t0}")s command=$(awk "BEGIN{print $t2-$t1}")s" > /run/rxe-vm/timing
echo $rc > /run/rxe-vm/rc
cd /; sync
for p in "${SH_PATHS[@]}"; do umount "$p" 2>/dev/null; done
poweroff
GUEST

mkfifo "$RUN/stdout.fifo" "$RUN/stderr.fifo"
cat "$RUN/stdout.fifo" & CAT1=$!
cat "$RUN/stderr.fifo" >&2 & CAT2=$!
if [ "$VERBOSE" = 1 ]; then mkfifo "$RUN/console.fifo"; tee "$RUN/console.log" < "$RUN/console.fifo" | sed 's/^/[console] /' >&2 & CAT3=$!
  CONSOLE="$RUN/console.fifo"; else CONSOLE="$RUN/console.log"; CAT3=; fi

Q=(qemu-system-x86_64 -accel tcg -cpu max -m "$MEM" -smp "$SMP" -nodefaults -no-user-config
   -display none -no-reboot -monitor none
   -kernel "$KROOT/boot/vmlinuz-$KVER" -initrd "$VMDIR/initramfs-$KVER.cpio.gz"
   -append "console=ttyS0 loglevel=4 panic=-1 rdinit=/init${RXE_VM_APPEND:+ $RXE_VM_APPEND}"
   -chardev "file,id=con,path=$CONSOLE" -serial chardev:con
   -fsdev "local,id=f0,path=$GUEST_ROOT,security_model=none,readonly=on,multidevs=remap"
   -device virtio-9p-pci,fsdev=f0,mount_tag=hostroot
   -fsdev "local,id=f1,path=$KROOT/lib/modules,security_model=none,readonly=on"
   -device virtio-9p-pci,fsdev=f1,mount_tag=kmods
   -fsdev "local,id=f2,path=$RUN,security_model=none" -device virtio-9p-pci,fsdev=f2,mount_tag=ctl
   -device virtio-serial-pci
   -chardev "file,id=o1,path=$RUN/stdout.fifo" -device virtserialport,chardev=o1,name=stdout
   -chardev "file,id=o2,path=$RUN/stderr.fifo" -device virtserialport,chardev=o2,name=stderr)
IFS=: read -r -a _disks <<< "${RXE_VM_DISK:-}"
for d in "${_disks[@]}"; do [ -n "$d" ] &&
  Q+=(-drive "file=$d,if=virtio,format=raw,cache=${RXE_VM_DISK_CACHE:-unsafe},discard=unmap"); done
IFS=: read -r -a _nvmes <<< "${RXE_VM_NVME:-}"
i=0; for d in "${_nvmes[@]}"; do [ -n "$d" ] || continue
  Q+=(-drive "file=$d,if=none,id=nvm$i,format=raw,cache=${RXE_VM_DISK_CACHE:-unsafe},discard=unmap"
      -device "nvme,serial=rdmablk-nvme$i,drive=nvm$i"); i=$((i+1)); done
[ -n "${RXE_VM_PIDFILE:-}" ] && Q+=(-pidfile "$RXE_VM_PIDFILE")
i=0; for p in "${SHARES[@]}"; do
  Q+=(-fsdev "local,id=w$i,path=$p,security_model=none" -device "virtio-9p-pci,fsdev=w$i,mount_tag=rw$i"); i=$((i+1)); done

log "starting VM (TCG, ${SMP} vCPU, ${MEM} MiB, timeout ${TIMEOUT}s)"
T0=$(date +%s.%N)
timeout -k 5 "$TIMEOUT" "${Q[@]}" </dev/null 2>"$RUN/qemu.err" & QPID=$!
set +e; wait $QPID; QRC=$?; set -e; QPID=
T1=$(date +%s.%N)
# release the relays even if qemu never opened the fifos, then wait for them
for f in "$RUN"/*.fifo; do exec 8<>"$f"; exec 8>&-; done
wait $CAT1 $CAT2 $CAT3 2>/dev/null || true

log "VM wall time $(awk "BEGIN{printf \"%.1f\", $T1-$T0}")s; guest: $(cat "$RUN/timing" 2>/dev/null || echo n/a)"
KREL_GUEST=$(head -n 1 "$RUN/krel" 2>/dev/null || true)
log "guest kernel: ${KREL_GUEST:-unknown} (booted $KVER from $KPKG)"
if [ -n "${RXE_VM_KREL:-}" ]; then
  echo "${KREL_GUEST:-unknown}" >> "$RXE_VM_KREL" || echo "rxe-vm: warning: cannot write $RXE_VM_KREL" >&2
fi
if [ -f "$RUN/rc" ]; then exit "$(cat "$RUN/rc")"; fi
{
  if [ $QRC = 124 ]; then echo "rxe-vm: error: timed out after ${TIMEOUT}s (RXE_VM_TIMEOUT)"
  elif [ -f "$RUN/error" ]; then echo "rxe-vm: error: guest setup failed: $(cat "$RUN/error")"
  else echo "rxe-vm: error: guest did not report an exit status (qemu rc=$QRC)"; fi
  [ -s "$RUN/qemu.err" ] && sed 's/^/[qemu] /' "$RUN/qemu.err"
  [ -s "$RUN/console.log" ] && { echo "--- last console lines ---"; tail -n 25 "$RUN/console.log"; }
} >&2
[ $QRC = 124 ] && exit 124 || exit 125
