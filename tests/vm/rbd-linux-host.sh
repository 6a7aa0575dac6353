#!/usr/bin/env bash
# rbd-linux-host.sh - the Linux kernel's NVMe-oF host (nvme-rdma) against rdmablk-target serving
# a Ceph RBD image, on Soft-RoCE. Run it INSIDE the rxe VM, from the repository root:
#
#   RXE_VM_MEM=3072 tools/rxe-vm/run-in-vm.sh bash tests/vm/rbd-linux-host.sh
#
# Where Ceph runs: inside the same VM, as tools/ceph-dev's single-node cluster (a monitor, a
# manager and a memstore OSD on the guest's loopback, from the host's Ceph packages seen over
# 9p). The VM's only network is the rxe device's dummy netdev, so a cluster on the host could
# not be reached; inside, the gateway talks to real Ceph daemons over real messenger sockets,
# and the host talks to the gateway over real RDMA (rxe0).
#
# Steps (a failure names its step): start the cluster and make an image; start rdmablk-target
# (verbs provider) with the image as namespace 1; `nvme connect -t $TRTYPE` (rdma); the block device's
# size is the image's; fio crc32c verify over random I/O of 4k-128k (write, then read back);
# a known 8 MiB pattern written with O_DIRECT and `nvme flush` is found at its offset in the
# image by `rbd export` (the data is in Ceph, not in the gateway); a discard reads back zeroes;
# the gateway SIGKILLed under fio verify and started again: the host reconnects, retries what
# was in flight and fio sees no error and no verify failure (RBD's exclusive lock passes to the
# new gateway once the dead one's watch times out, 5 s in tools/ceph-dev); `nvme disconnect`;
# SIGTERM: the target exits 0 with its arena back to idle; the cluster is stopped.
# Prints PASS or FAIL (with the target log and dmesg) and exits non-zero on failure.
#
# Env: RDMABLK_TARGET (binary; default build/debug/rdmablk-target), RXE_VM_IP (10.0.2.15),
#      PORT (4420), FIO_SIZE (16m), FIO_RUNTIME (8 s of verified writes around the kill).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
IP=${RXE_VM_IP:-10.0.2.15}
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh"  # TRTYPE, nvme_connect
PORT=${PORT:-4420}
NQN=nqn.2026-11.io.rdmablk:vm-rbd
FIO_SIZE=${FIO_SIZE:-16m}
FIO_RUNTIME=${FIO_RUNTIME:-8}
IMAGE_MIB=128
WORK=$(mktemp -d /tmp/rdmablk-vm-rbd.XXXXXX)
# The cluster's directory is in the guest's tmpfs: it dies with the VM whatever happens.
export RDMABLK_CEPH_DIR=$WORK/ceph RDMABLK_CEPH_MEM=512M RDMABLK_CEPH_IMAGE_SIZE=${IMAGE_MIB}M
TPID=
CONNECTED=0

say() { echo "rbd-linux-host: $*"; }

exec 3>&1
fail() {
  exec 1>&3 2>&3
  say "FAIL: $*"
  echo "----- target log (last 60 lines) -----"
  tail -n 60 "$WORK/target.log" 2>/dev/null
  echo "----- dmesg (last 40 lines) -----"
  dmesg | tail -n 40
  [ "$CONNECTED" = 1 ] && nvme disconnect -n "$NQN" >/dev/null 2>&1
  [ -n "$TPID" ] && kill -KILL "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  "$ROOT/tools/ceph-dev" stop >/dev/null 2>&1
  echo "RESULT: FAIL (step ${STEP:-setup}: $*)"
  exit 1
}

STEP=setup
step() { STEP=$1; say "--- step $STEP (at ${SECONDS}s)"; }

[ -x "$BIN" ] || fail "no target binary at $BIN (cargo build -p rdmablk-target)"
for t in nvme fio ceph-mon rbd; do command -v $t >/dev/null || fail "$t is missing"; done
ibv_devinfo -d rxe0 >/dev/null 2>&1 || fail "no rxe0 device (run inside the rxe VM)"

step ceph
t0=$SECONDS
"$ROOT/tools/ceph-dev" start >"$WORK/ceph-env" 2>"$WORK/ceph-start.log" ||
  { cat "$WORK/ceph-start.log"; fail "tools/ceph-dev start"; }
eval "$(cat "$WORK/ceph-env")"
say "cluster up in $((SECONDS - t0)) s (conf $CEPH_CONF, image $RDMABLK_RBD_POOL/$RDMABLK_RBD_IMAGE)"
RBD=$(type -P rbd)
rbd() { timeout 120 "$RBD" -c "$CEPH_CONF" "$@"; }

cat >"$WORK/target.toml" <<CFG
[[listener]]
provider = "verbs"
address = "$IP"
port = $PORT

[target]
worker_threads = 1
poll_mode = "interrupt"
keep_alive_granularity_ms = 1000

[arena]
bytes = "64MiB"
lock = false

[limits]
max_queue_depth = 128
max_io_size = 131072

[[subsystem]]
nqn = "$NQN"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 4096
backend = { kind = "rbd", pool = "$RDMABLK_RBD_POOL", image = "$RDMABLK_RBD_IMAGE", ceph_conf = "$CEPH_CONF", user = "admin", keyring = "$CEPH_KEYRING" }
CFG

source "$ROOT/tests/vm/lib.sh"

step target
start_target
modprobe nvme-rdma || fail "modprobe nvme-rdma"

step connect
say "nvme connect -t $TRTYPE -a $IP -s $PORT -n $NQN"
nvme_connect -s "$PORT" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120 ||
  fail "nvme connect"
CONNECTED=1
DEV=$(ns_dev) || fail "no block device for $NQN"
BYTES=$(blockdev --getsize64 "$DEV")
say "block device $DEV, $BYTES bytes"
[ "$BYTES" = $((IMAGE_MIB << 20)) ] || fail "the device has $BYTES bytes, the image $((IMAGE_MIB << 20))"

step fio-verify
cd "$WORK" || fail "cd $WORK"   # fio's verify state files go to the current directory
common=(--filename="$DEV" --direct=1 --ioengine=libaio --iodepth=16 --bsrange=4k-128k
        --size="$FIO_SIZE" --randrepeat=1 --randseed=42 --verify=crc32c --verify_fatal=1)
fio --name=write-verify --rw=randwrite --do_verify=1 "${common[@]}" \
  --output="$WORK/fio1.txt" || { cat "$WORK/fio1.txt"; fail "fio write+verify"; }
fio --name=write-verify --rw=randwrite --verify_only=1 "${common[@]}" \
  --output="$WORK/fio2.txt" || { cat "$WORK/fio2.txt"; fail "fio verify_only"; }
grep -hE "^ +(read|write):" "$WORK"/fio[12].txt | sed 's/^/  /'

step in-ceph
# 8 MiB of random data at 64 MiB, O_DIRECT, then a Flush: `rbd export` must find it there.
head -c $((8 << 20)) /dev/urandom >"$WORK/pattern" || fail "cannot make the pattern"
dd if="$WORK/pattern" of="$DEV" bs=1M seek=64 oflag=direct status=none || fail "dd to $DEV"
nvme flush "$DEV" -n 1 >/dev/null || fail "nvme flush"
rbd export --no-progress "$RDMABLK_RBD_POOL/$RDMABLK_RBD_IMAGE" "$WORK/export.img" ||
  fail "rbd export"
cmp -n $((8 << 20)) -i $((64 << 20)):0 "$WORK/export.img" "$WORK/pattern" ||
  fail "the image does not hold at 64 MiB what the host wrote there"
say "rbd export finds the 8 MiB the host wrote at 64 MiB"
rm -f "$WORK/export.img"

step discard
blkdiscard -o $((64 << 20)) -l $((4 << 20)) "$DEV" || fail "blkdiscard"
dd if="$DEV" bs=1M skip=64 count=4 iflag=direct status=none | cmp -n $((4 << 20)) - /dev/zero ||
  fail "a discarded range does not read back zeroes"
# (Files, not process substitution: the guest has no /dev/fd.)
dd if="$DEV" of="$WORK/after" bs=1M skip=68 count=4 iflag=direct status=none ||
  fail "cannot read the range after the discard"
tail -c +$(((4 << 20) + 1)) "$WORK/pattern" >"$WORK/pattern-tail"
cmp "$WORK/after" "$WORK/pattern-tail" || fail "the discard changed the blocks after its range"
say "a 4 MiB discard reads back zeroes and leaves its neighbour alone"

step gateway-killed
# fio writes with verification for FIO_RUNTIME s; 2 s in, the gateway is SIGKILLed and started
# again 1 s later. The host's I/O waits (reconnect every second, ctrl-loss-tmo 120 s), then is
# retried on the new connection; the new gateway's first write waits for the exclusive lock.
fio --name=killed --rw=randwrite --time_based --runtime="$FIO_RUNTIME" --verify_backlog=16 \
  "${common[@]}" --output="$WORK/fio3.txt" &
FPID=$!
sleep 2
say "SIGKILL the gateway (pid $TPID) under fio"
kill -KILL "$TPID"; wait "$TPID" 2>/dev/null; TPID=
sleep 1
start_target
say "gateway started again (pid $TPID)"
wait "$FPID" || { cat "$WORK/fio3.txt"; fail "fio saw an error across the gateway's SIGKILL"; }
grep -hE "^ +write:|err=" "$WORK/fio3.txt" | sed 's/^/  /'

step disconnect
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
CONNECTED=0
sleep 1
kill -TERM "$TPID"
wait "$TPID"
RC=$?
TPID=
[ "$RC" = 0 ] || fail "target exited with status $RC"
LAST=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/target.log" | grep 'arena usage' | tail -n 1)
grep -q 'arena_bytes_in_use=0' <<<"$LAST" || fail "arena not idle after the host left ($LAST)"
"$ROOT/tools/ceph-dev" stop >/dev/null 2>&1
echo "RESULT: PASS (Linux nvme-rdma host <-> rdmablk-target <-> Ceph RBD in the VM: connect, size, fio crc32c verify, data found in the image by rbd export, discard, gateway SIGKILLed and restarted under fio with no error, disconnect, clean exit)"
rm -rf "$WORK"
