#!/usr/bin/env bash
# many-queues.sh - a real server's host against a default rdmablk-target: the Linux host, in a
# VM with many vCPUs (RXE_VM_SMP=32), makes one I/O queue per CPU at queue size 128, and a
# target with no [arena] and no [limits] (what the README's quickstart invites) must take them
# all and serve fio verify on every one. Run it INSIDE the rxe VM, from the repository root:
#
#   RXE_VM_SMP=32 RXE_VM_MEM=4096 tools/rxe-vm/run-in-vm.sh bash tests/vm/many-queues.sh
#   TRTYPE=tcp RXE_VM_SMP=32 ... (NVMe/TCP)
#
# Steps: start rdmablk-target (a listener, one RAM namespace; nothing else configured); `nvme
# connect -t $TRTYPE` with the host's defaults (nr_io_queues = CPUs, queue size 128); the
# target counts that many I/O queues of that depth; fio with one job pinned to each CPU
# (so each job's I/O goes through its CPU's queue) writes and verifies crc32c blocks of
# 4k-128k; the target's status shows no command failed and its data pool back to idle;
# disconnect and SIGTERM, exit 0. Prints PASS or FAIL (with the target log and dmesg).
#
# Env: RDMABLK_TARGET, RDMABLK_CTL (binaries; default build/debug/...), RXE_VM_IP (10.0.2.15),
#      PORT (4420), MIN_QUEUES (the queues the host must make; default: its CPU count),
#      FIO_SIZE (4m per job).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
CTL=${RDMABLK_CTL:-$ROOT/build/debug/rdmablk-ctl}
IP=${RXE_VM_IP:-10.0.2.15}
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh"  # TRTYPE, nvme_connect
PORT=${PORT:-4420}
NQN=nqn.2026-11.io.rdmablk:vm-many-queues
CPUS=$(nproc)
MIN_QUEUES=${MIN_QUEUES:-$CPUS}
WORK=$(mktemp -d /tmp/rdmablk-vm.XXXXXX)
TPID=
CONNECTED=0

say() { echo "many-queues: $*"; }
exec 3>&1
fail() {
  exec 1>&3 2>&3
  say "FAIL: $*"
  echo "----- target log (last 60 lines) -----"
  tail -n 60 "$WORK/target.log" 2>/dev/null
  echo "----- dmesg (last 40 lines) -----"
  dmesg | tail -n 40
  [ "$CONNECTED" = 1 ] && nvme disconnect -n "$NQN" >/dev/null 2>&1
  [ -n "$TPID" ] && kill -TERM "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  echo "RESULT: FAIL (step ${STEP:-setup}: $*)"
  exit 1
}

[ -x "$BIN" ] || fail "no target binary at $BIN"
[ -x "$CTL" ] || fail "no rdmablk-ctl at $CTL"
command -v nvme >/dev/null || fail "nvme-cli is missing"
command -v fio >/dev/null || fail "fio is missing"
if [ "$TRTYPE" = rdma ]; then
  ibv_devinfo -d rxe0 >/dev/null 2>&1 || fail "no rxe0 device (run inside the rxe VM)"
  LISTENER='provider = "verbs"'
else
  LISTENER="transport = \"$TRTYPE\""
fi
SOCK=$WORK/ctl.sock

# The default configuration: no [target], no [arena], no [limits].
cat >"$WORK/target.toml" <<CFG
[[listener]]
$LISTENER
address = "$IP"
port = $PORT

[control]
socket = "$SOCK"

[[subsystem]]
nqn = "$NQN"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 4096
backend = { kind = "ram", size = "256MiB" }
CFG

source "$ROOT/tests/vm/lib.sh"
STEP=setup
step() { STEP=$1; say "--- step $STEP (at ${SECONDS}s)"; }
status() { "$CTL" --socket "$SOCK" status --json; }

start_target
modprobe "nvme-$TRTYPE" || fail "modprobe nvme-$TRTYPE"
say "$CPUS CPUs; $(grep -m1 'arena' "$WORK/target.log" | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-200)"

step connect
nvme_connect -s "$PORT" -n "$NQN" || fail "nvme connect (the host's defaults: a queue per CPU)"
CONNECTED=1
DEV=$(ns_dev 1) || fail "no block device for $NQN"
CTRL=$(ctrl_of "$NQN") || fail "no live controller for $NQN"
QUEUES=$(status | python3 -c '
import json, sys
s = json.load(sys.stdin)["result"]
print(sum(c["io_queues"] for c in s["controllers"] if c["subnqn"] == sys.argv[1]))' "$NQN") ||
  fail "rdmablk-ctl status"
SQSIZE=$(cat "/sys/class/nvme/${CTRL#/dev/}/sqsize" 2>/dev/null || echo '?')
say "the host made $QUEUES I/O queues (sqsize $SQSIZE); $CPUS CPUs"
[ "$QUEUES" -ge "$MIN_QUEUES" ] || fail "$QUEUES I/O queues, want at least $MIN_QUEUES"

step fio-verify-every-queue
cd "$WORK" || fail "cd $WORK"
# One job per CPU, each pinned to its own CPU: blk-mq maps a CPU to its own hardware queue,
# so every queue carries verified I/O.
fio --name=per-cpu --filename="$DEV" --direct=1 --ioengine=libaio --iodepth=8 \
  --bsrange=4k-128k --rw=randwrite --do_verify=1 --verify=crc32c --verify_fatal=1 \
  --numjobs="$CPUS" --cpus_allowed="0-$((CPUS - 1))" --cpus_allowed_policy=split \
  --size="${FIO_SIZE:-4m}" --offset_increment="${FIO_SIZE:-4m}" --randrepeat=1 --randseed=7 --group_reporting \
  --output="$WORK/fio.txt" || { cat "$WORK/fio.txt"; fail "fio write+verify on every queue"; }
grep -hE "^ +(read|write):|err=" "$WORK/fio.txt" | sed 's/^/  /'

step target-counters
# The workers publish their pool's counters every few milliseconds: wait (5 s at most) for
# every buffer to be back.
for _ in $(seq 1 50); do
  status >"$WORK/status.json" || fail "rdmablk-ctl status"
  python3 - "$WORK/status.json" <<'PY' && break
import json, sys
p = json.load(open(sys.argv[1]))["result"]["data_pool"]
print(f"  data pool: {p['bytes']} bytes, {p['bytes_in_use']} in use, {p['waits']} commands waited")
sys.exit(p["bytes_in_use"] != 0)
PY
  sleep 0.1
done
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["result"]["data_pool"]["bytes_in_use"] != 0)' \
  "$WORK/status.json" || fail "the data pool is not idle after fio"

step disconnect
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
CONNECTED=0
kill -TERM "$TPID"
wait "$TPID"; rc=$?
TPID=
[ "$rc" = 0 ] || fail "the target exited $rc at SIGTERM"
say "PASS ($QUEUES I/O queues over $TRTYPE on a default target, fio verify on each)"
echo "RESULT: PASS"
