#!/usr/bin/env bash
# linux-host.sh - interop proof: the Linux kernel's NVMe-oF host (nvme-rdma on Soft-RoCE, or
# nvme-tcp with TRTYPE=tcp) against rdmablk-target. Run it INSIDE the rxe VM, from the
# repository root:
#
#   tools/rxe-vm/run-in-vm.sh bash tests/vm/linux-host.sh
#   TRTYPE=tcp tools/rxe-vm/run-in-vm.sh bash tests/vm/linux-host.sh
#
# Steps (a failure names its step): start rdmablk-target ($IP:$PORT: the verbs provider, or a
# tcp listener; ns 1 in RAM with 4 KiB blocks, ns 2 a file with 512-byte blocks); `nvme
# discover` lists the subsystem; `nvme connect -t $TRTYPE`; fio crc32c verify over random I/O of 4k-128k; the admin
# set nvme-cli uses (id-ctrl, id-ns, list-ns, ns-descs, logs, features), each answer checked;
# discard then read back zeroes, write zeroes (`blkdiscard -z`), `nvme flush`; a file system
# (mkfs.ext4 with its discard, files, fstrim, fsck, remount, checksums); `nvme reset` under
# fio verify; `nvme disconnect` + `nvme connect-all`; the target restarted (SIGTERM, start)
# under fio with a long ctrl-loss-tmo: fio sees no error; `nvme disconnect`; SIGTERM the
# target and check it exits 0 with its arena back to idle. Prints PASS or FAIL (with the
# target log and dmesg) and exits non-zero on failure.
#
# Env: RDMABLK_TARGET (binary; default build/debug/rdmablk-target), RXE_VM_IP (10.0.2.15),
#      PORT (4420), FIO_SIZE (32m), FIO_RUNTIME (5 s of mixed random I/O).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
IP=${RXE_VM_IP:-10.0.2.15}
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh"  # TRTYPE, nvme_connect
PORT=${PORT:-4420}
NQN=nqn.2026-11.io.rdmablk:vm-interop
FIO_SIZE=${FIO_SIZE:-32m}
FIO_RUNTIME=${FIO_RUNTIME:-5}
WORK=$(mktemp -d /tmp/rdmablk-vm.XXXXXX)
TPID=
CONNECTED=0

say() { echo "linux-host: $*"; }

# fail writes to the script's own stdout (fd 3) even from a command whose output a step
# redirects to a file.
exec 3>&1
fail() {
  exec 1>&3 2>&3
  say "FAIL: $*"
  echo "----- target log (last 60 lines) -----"
  tail -n 60 "$WORK/target.log" 2>/dev/null
  echo "----- dmesg (last 60 lines) -----"
  dmesg | tail -n 60
  [ "$CONNECTED" = 1 ] && nvme disconnect -n "$NQN" >/dev/null 2>&1
  [ -n "$TPID" ] && kill -TERM "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  echo "RESULT: FAIL (step ${STEP:-setup}: $*)"
  exit 1
}

[ -x "$BIN" ] || fail "no target binary at $BIN (cargo build -p rdmablk-target)"
command -v nvme >/dev/null || fail "nvme-cli is missing"
command -v fio >/dev/null || fail "fio is missing"
if [ "$TRTYPE" = rdma ]; then
  ibv_devinfo -d rxe0 >/dev/null 2>&1 || fail "no rxe0 device (run inside the rxe VM)"
  LISTENER='provider = "verbs"'
else
  LISTENER="transport = \"$TRTYPE\""
fi

# A block device for the block backend: a loop device over a file in the guest's tmpfs.
modprobe loop 2>/dev/null || true
truncate -s 64M "$WORK/blk.img" || fail "truncate $WORK/blk.img"
LOOPDEV=$(losetup -f --show "$WORK/blk.img") || fail "losetup (no loop device support?)"
NQN_KINDS=nqn.2026-11.io.rdmablk:vm-kinds

cat >"$WORK/target.toml" <<CFG
[[listener]]
$LISTENER
address = "$IP"
port = $PORT

[target]
worker_threads = 2
poll_mode = "interrupt"
keep_alive_granularity_ms = 1000

[arena]
bytes = "160MiB"
lock = false

[limits]
max_queue_depth = 128
max_io_size = 131072
in_capsule_data_size = 4096
max_queues_per_controller = 8
max_connections = 16

[[subsystem]]
nqn = "$NQN"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 4096
backend = { kind = "ram", size = "128MiB" }

[[subsystem.namespace]]
nsid = 2
block_size = 512
backend = { kind = "file", path = "$WORK/ns2.img", create_size = "64MiB" }

[[subsystem]]
nqn = "$NQN_KINDS"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
backend = { kind = "block", path = "$LOOPDEV" }

[[subsystem.namespace]]
nsid = 2
backend = { kind = "null", size = "64MiB" }

[[subsystem]]
nqn = "nqn.2026-11.io.rdmablk:vm-hidden"
hosts = ["nqn.2026-11.io.rdmablk:someone-else"]

[[subsystem.namespace]]
nsid = 1
backend = { kind = "null", size = "16MiB" }
CFG

source "$ROOT/tests/vm/lib.sh"

STEP=setup
step() { STEP=$1; say "--- step $STEP (at ${SECONDS}s)"; }
# check COND-CMD...: fails the current step with the command line when it fails.
check() { "$@" || fail "$STEP: $*"; }

start_target
modprobe "nvme-$TRTYPE" || fail "modprobe nvme-$TRTYPE"

step discover
nvme_discover -s "$PORT" >"$WORK/discover.txt" 2>&1 ||
  { cat "$WORK/discover.txt"; fail "discover: nvme discover"; }
sed 's/^/  /' "$WORK/discover.txt"
grep -q "subnqn: *$NQN" "$WORK/discover.txt" || fail "discover: $NQN not listed"
grep -q "vm-hidden" "$WORK/discover.txt" && fail "discover: a subsystem the host may not use is listed"
grep -q "trsvcid: *$PORT" "$WORK/discover.txt" || fail "discover: no trsvcid $PORT"

step connect
say "nvme connect -t $TRTYPE -a $IP -s $PORT -n $NQN"
nvme_connect -s "$PORT" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120 ||
  fail "nvme connect"
CONNECTED=1
DEV=$(ns_dev 1) || fail "connect: no block device for $NQN ns 1"
DEV2=$(ns_dev 2) || fail "connect: no block device for $NQN ns 2"
CTRL=$(ctrl_of "$NQN")
say "block devices $DEV ($(cat /sys/block/$(basename "$DEV")/size) sectors), $DEV2; controller $CTRL"

step fio-verify
common=(--filename="$DEV" --direct=1 --ioengine=libaio --iodepth=16 --bsrange=4k-128k
        --size="$FIO_SIZE" --randrepeat=1 --randseed=42 --verify=crc32c --verify_fatal=1)
cd "$WORK" || fail "cd $WORK"   # fio writes its verify state files into the current directory
say "fio: random writes of 4k-128k, then verify every block (crc32c)"
fio --name=write-verify --rw=randwrite --do_verify=1 "${common[@]}" \
  --output="$WORK/fio1.txt" || { cat "$WORK/fio1.txt"; fail "fio write+verify"; }
say "fio: random reads verifying the same blocks again"
fio --name=write-verify --rw=randwrite --verify_only=1 "${common[@]}" \
  --output="$WORK/fio2.txt" || { cat "$WORK/fio2.txt"; fail "fio verify_only"; }
say "fio: ${FIO_RUNTIME}s of mixed random reads and writes (4k-128k) with verification"
fio --name=mixed --rw=randrw --rwmixread=50 --verify_backlog=32 --time_based \
  --runtime="$FIO_RUNTIME" "${common[@]}" --output="$WORK/fio3.txt" \
  || { cat "$WORK/fio3.txt"; fail "fio mixed"; }
grep -hE "^ +(read|write):|err=" "$WORK"/fio[123].txt | sed 's/^/  /'

source "$ROOT/tests/vm/linux-host-steps.sh"

step disconnect
say "nvme disconnect -n $NQN"
nvme disconnect -n "$NQN" || fail "nvme disconnect"
CONNECTED=0
# The host's disconnect reaches the target asynchronously: wait (30 s at most, a hang guard)
# until it holds no connection, so that the exit below finds the arena idle.
for _ in $(seq 1 300); do
  "$CTL" status --json 2>/dev/null |
    python3 -c 'import json, sys; sys.exit(json.load(sys.stdin)["result"]["connections"] != 0)' &&
    break
  sleep 0.1
done
say "stopping the target (SIGTERM)"
kill -TERM "$TPID"
wait "$TPID"
RC=$?
TPID=
[ "$RC" = 0 ] || fail "target exited with status $RC"
LAST=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/target.log" | grep 'arena usage' | tail -n 1)
say "last arena line: $LAST"
grep -q 'arena_bytes_in_use=0' <<<"$LAST" || fail "arena not idle after the host left"
losetup -d "$LOOPDEV" 2>/dev/null
dmesg | grep -iE "nvme|rdma" | tail -n 12 | sed 's/^/  dmesg: /'
echo "RESULT: PASS (Linux nvme-$TRTYPE host <-> rdmablk-target over $TRTYPE: discover, connect, fio crc32c verify, admin set, discard/write zeroes/flush, ext4 with fstrim and fsck, reset and target restart under fio, connect-all, a namespace added and removed live, lifecycle and queue options, block and null backends, disconnect, clean exit)"
rm -rf "$WORK"
