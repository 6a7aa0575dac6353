#!/usr/bin/env bash
# keepalive-stall.sh - the Linux host with its default keep-alive (no --keep-alive-tmo) against
# rdmablk-target on rxe, while the WHOLE VM stalls for 2 s at a time (qemu SIGSTOPped from
# outside by tools/rxe-vm/stall-watcher.sh: both sides' clocks jump on resume, as after a
# hypervisor pause). Run INSIDE the rxe VM with STALL_DIR set to a writable share the watcher
# watches:
#   1. under load: fio crc32c verify runs while the VM stalls 3 x 2 s;
#   2. idle: no I/O at all (only Keep Alive keeps the controller), 3 x 1 s stalls (the target
#      allows no slack past KATO: Linux sends Keep Alive every KATO/2 = 2.5 s, so a 2 s stall
#      of an idle host leaves 0.5 s, less than a loaded TCG guest may need; docs/reliability.md).
# Passes if fio verifies everything, the controller stays live with the same instance
# throughout (no keep-alive teardown in the target's log, no reconnect in dmesg).
# The guest's clock must see each stall (else nothing was tested): a stall() that took the
# guest less than the stalled time fails. STALL_SECS=6 (past the 5 s KATO) must fail: the
# check that this test can.
# Env: STALL_DIR (required), STALL_SECS (2), RDMABLK_TARGET, RXE_VM_IP (10.0.2.15), PORT (4420).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
IP=${RXE_VM_IP:-10.0.2.15}
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh"  # TRTYPE, nvme_connect
PORT=${PORT:-4420}
NQN=nqn.2026-11.io.rdmablk:ka-stall
STALL_DIR=${STALL_DIR:?STALL_DIR: a directory the host-side stall-watcher.sh watches}
SECS=${STALL_SECS:-2}
WORK=$(mktemp -d /tmp/ka-stall.XXXXXX)
TPID= CONNECTED=0
say() { echo "keepalive-stall: $*"; }
fail() {
  say "FAIL: $*"
  echo "----- target log (last 30 lines) -----"; tail -n 30 "$WORK/target.log" 2>/dev/null
  echo "----- dmesg (last 30 lines) -----"; dmesg | tail -n 30
  [ "$CONNECTED" = 1 ] && nvme disconnect -n "$NQN" >/dev/null 2>&1
  [ -n "$TPID" ] && kill -TERM "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  echo "RESULT: FAIL ($*)"
  exit 1
}

# stall SECONDS COUNT: asks the host to stall the VM, waits until it did.
stall() {
  local t0; t0=$(date +%s.%N)
  rm -f "$STALL_DIR/stall-done"
  echo "$1 $2" > "$STALL_DIR/stall-request.tmp" && mv "$STALL_DIR/stall-request.tmp" "$STALL_DIR/stall-request"
  for _ in $(seq 1 600); do [ -f "$STALL_DIR/stall-done" ] && break; sleep 0.1; done
  [ -f "$STALL_DIR/stall-done" ] || fail "the host did not stall the VM (is stall-watcher.sh running?)"
  local took; took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  say "host: $(cat "$STALL_DIR/stall-done"); the guest's clock moved ${took} s"
  awk -v t="$took" -v n="$(( $1 * $2 ))" 'BEGIN { exit !(t >= n) }' ||
    fail "the guest's clock moved ${took} s over $2 stalls of $1 s: the stalls were not seen"
}

cat >"$WORK/target.toml" <<CFG
[[listener]]
provider = "verbs"
address = "$IP"
port = $PORT

[control]
socket = ""

[arena]
bytes = "64MiB"
lock = false

[[subsystem]]
nqn = "$NQN"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 4096
backend = { kind = "ram", size = "64MiB" }
CFG
RUST_LOG=info "$BIN" --config "$WORK/target.toml" >"$WORK/target.out" 2>"$WORK/target.log" &
TPID=$!
for _ in $(seq 1 300); do grep -q '^ready$' "$WORK/target.out" 2>/dev/null && break; sleep 0.1; done
grep -q '^ready$' "$WORK/target.out" || fail "target did not print ready within 30 s"
modprobe nvme-rdma || fail "modprobe nvme-rdma"
dmesg -C
nvme_connect -s "$PORT" -n "$NQN" || fail "nvme connect"
CONNECTED=1
ctrl=
for c in /sys/class/nvme/nvme*; do
  [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] && ctrl=$(basename "$c")
done
[ -n "$ctrl" ] || fail "no controller for $NQN"
dev=
for _ in $(seq 100); do
  for b in /sys/block/"$ctrl"*n*; do [ -b "/dev/${b##*/}" ] && dev=/dev/${b##*/}; done
  [ -n "$dev" ] && break; sleep 0.1
done
[ -n "$dev" ] || fail "no block device on $ctrl"
cntlid=$(cat "/sys/class/nvme/$ctrl/cntlid")
say "connected: $ctrl ($dev), cntlid $cntlid, default KATO; target: $(grep -ao 'kato_ms=[0-9]*' "$WORK/target.log" | head -1)"

say "1. under load: fio crc32c verify while the VM stalls 3 x $SECS s"
cd "$WORK" || fail "cd $WORK"
fio --name=ka --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 --rw=randrw \
  --bs=4k --size=32m --verify=crc32c --verify_fatal=1 --verify_backlog=64 --time_based \
  --runtime=25 --output="$WORK/fio.txt" &
FIO=$!
sleep 4
stall "$SECS" 3
wait $FIO || { cat "$WORK/fio.txt"; fail "fio verify under the stalls"; }
grep -E "err=" "$WORK/fio.txt" | sed 's/^/  /'

IDLE_SECS=$(( SECS > 1 ? SECS - 1 : 1 ))
say "2. idle: only Keep Alive, 3 x $IDLE_SECS s stalls, then 10 s more"
stall "$IDLE_SECS" 3
sleep 10

state=$(cat "/sys/class/nvme/$ctrl/state")
[ "$state" = live ] || fail "controller $ctrl is $state after the stalls"
[ "$(cat "/sys/class/nvme/$ctrl/cntlid")" = "$cntlid" ] || fail "the controller was re-created"
grep -aq "keep-alive timeout" "$WORK/target.log" && fail "the target timed a keep-alive out"
dmesg | grep -E "nvme|$ctrl" | grep -iE "reconnect|keep.alive|timeout|reset" &&
  fail "the host saw a timeout or reconnected"
dd if="$dev" of=/dev/null bs=4k count=256 iflag=direct status=none || fail "I/O after the stalls"
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
CONNECTED=0
kill -TERM "$TPID"; wait "$TPID" || fail "target exit status $?"
say "6 whole-VM stalls (3 of $SECS s under fio verify, 3 of $IDLE_SECS s idle): controller $ctrl stayed live (cntlid $cntlid)"
echo "RESULT: PASS"
