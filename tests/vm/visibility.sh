#!/usr/bin/env bash
# visibility.sh - per-host namespace visibility with two Linux hosts: one subsystem admits
# host A and host B (two `nvme connect`s of this VM with distinct host NQNs and host IDs);
# namespace 1 is visible to A only, namespace 2 to B only. Run it INSIDE the rxe VM, from the
# repository root:
#
#   tools/rxe-vm/run-in-vm.sh bash tests/vm/visibility.sh
#   TRTYPE=tcp tools/rxe-vm/run-in-vm.sh bash tests/vm/visibility.sh
#
# Steps (a failure names its step):
#   see      each host connects (/dev/nvme-fabrics); each host's controller has exactly its namespace (its sysfs namespace entries and
#            `nvme list-ns`); A writes a pattern to namespace 1
#   move     `rdmablk-ctl namespace host add NQN 1 B`, then `... remove NQN 1 A`: namespace 1
#            appears under B's controller and vanishes from A's, both controllers stay the
#            same (name, cntlid, state live: no reconnect); B reads A's pattern back
#   file     the configuration file says `hosts = [B]` for namespace 1
# Prints RESULT: PASS or FAIL.
#
# Env: RDMABLK_TARGET (binary; default build/debug/rdmablk-target), RXE_VM_IP (10.0.2.15),
#      TRTYPE (rdma or tcp), PORT (4420).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
CTL=${RDMABLK_CTL:-$(dirname "$BIN")/rdmablk-ctl}
IP=${RXE_VM_IP:-10.0.2.15}
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh"  # TRTYPE, nvme_connect
PORT=${PORT:-4420}
NQN=nqn.2026-11.io.rdmablk:vm-visibility
HOST_A=nqn.2014-08.org.nvmexpress:uuid:6e6f7374-0000-4000-8000-00000000000a
HOST_B=nqn.2014-08.org.nvmexpress:uuid:6e6f7374-0000-4000-8000-00000000000b
WORK=$(mktemp -d /tmp/rdmablk-vis.XXXXXX)
TPID=

say() { echo "visibility: $*"; }
exec 3>&1
fail() {
  exec 1>&3 2>&3
  say "FAIL: $*"
  echo "----- target log (last 40 lines) -----"; tail -n 40 "$WORK/target.log" 2>/dev/null
  echo "----- dmesg (last 40 lines) -----"; dmesg | tail -n 40
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  [ -n "$TPID" ] && kill -TERM "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  echo "RESULT: FAIL (step ${STEP:-setup}: $*)"
  exit 1
}
STEP=setup
step() { STEP=$1; say "--- step $STEP (at ${SECONDS}s)"; }
check() { "$@" >"$WORK/cmd.out" 2>&1 || fail "$STEP: $* failed: $(tail -n 5 "$WORK/cmd.out")"; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # start_target, ns_dev, connect_as, ctrl_of_host

[ -x "$BIN" ] || fail "no target binary at $BIN (cargo build -p rdmablk-target)"
[ -x "$CTL" ] || fail "no rdmablk-ctl at $CTL"
command -v nvme >/dev/null || fail "nvme-cli is missing"
if [ "$TRTYPE" = rdma ]; then
  ibv_devinfo -d rxe0 >/dev/null 2>&1 || fail "no rxe0 device (run inside the rxe VM)"
  LISTENER='provider = "verbs"'
else
  LISTENER="transport = \"$TRTYPE\""
fi

cat >"$WORK/target.toml" <<CFG
[[listener]]
$LISTENER
address = "$IP"
port = $PORT

[target]
worker_threads = 1
poll_mode = "interrupt"

[arena]
bytes = "64MiB"
lock = false

[limits]
max_queue_depth = 64
max_queues_per_controller = 3

[control]
socket = "$WORK/ctl.sock"

[[subsystem]]
nqn = "$NQN"
hosts = ["$HOST_A", "$HOST_B"]

# namespace 1: host A only
[[subsystem.namespace]]
nsid = 1
hosts = ["$HOST_A"]
backend = { kind = "ram", size = "16MiB" }

# namespace 2: host B only
[[subsystem.namespace]]
nsid = 2
hosts = ["$HOST_B"]
backend = { kind = "ram", size = "16MiB" }
CFG
modprobe "nvme-$TRTYPE" || fail "modprobe nvme-$TRTYPE"
start_target
ctl() { check "$CTL" --socket "$WORK/ctl.sock" "$@"; }

# nsids_of CTRL: the NSIDs of the namespaces the host scanned under controller CTRL (its
# nvmeXnY, or with native multipath its nvmeXcYnZ paths), sorted, comma-separated.
nsids_of() {
  local e ids=()
  for e in /sys/class/nvme/"$1"/nvme*n*; do
    [ -e "$e/nsid" ] || continue
    ids+=("$(cat "$e/nsid")")
  done
  printf '%s\n' "${ids[@]}" | grep . | sort -n | paste -sd, -
}

# expect_nsids CTRL WANT: waits up to 20 s until CTRL's namespaces are WANT ("1", "1,2", "").
expect_nsids() {
  local got
  for _ in $(seq 1 200); do
    got=$(nsids_of "$1")
    [ "$got" = "$2" ] && return 0
    sleep 0.1
  done
  fail "$STEP: controller $1 has namespaces [$got], want [$2]"
}

step see
connect_as "$HOST_A" 6e6f7374-0000-4000-8000-00000000000a
connect_as "$HOST_B" 6e6f7374-0000-4000-8000-00000000000b
A=$(ctrl_of_host "$HOST_A") || fail "$STEP: no controller for host A"
B=$(ctrl_of_host "$HOST_B") || fail "$STEP: no controller for host B"
[ "$A" != "$B" ] || fail "$STEP: one controller for both hosts"
A_ID=$(cat /sys/class/nvme/"$A"/cntlid) B_ID=$(cat /sys/class/nvme/"$B"/cntlid)
say "host A: $A (cntlid $A_ID), host B: $B (cntlid $B_ID)"
expect_nsids "$A" 1
expect_nsids "$B" 2
# What each controller reports (Identify active namespace list), beside what the host made of it.
[ "$(nvme list-ns "/dev/$A" | awk -F: '{ gsub(/ /, "", $2); print $2 }' | paste -sd, -)" = 0x1 ] ||
  fail "$STEP: nvme list-ns /dev/$A: $(nvme list-ns "/dev/$A" | paste -sd' ' -)"
[ "$(nvme list-ns "/dev/$B" | awk -F: '{ gsub(/ /, "", $2); print $2 }' | paste -sd, -)" = 0x2 ] ||
  fail "$STEP: nvme list-ns /dev/$B: $(nvme list-ns "/dev/$B" | paste -sd' ' -)"
DEV1=$(ns_dev 1) || fail "$STEP: no block device for namespace 1"
check dd if=/dev/urandom of="$WORK/pattern" bs=1M count=4 status=none
check dd if="$WORK/pattern" of="$DEV1" bs=1M oflag=direct status=none

step move
ctl namespace host add "$NQN" 1 "$HOST_B"
expect_nsids "$B" 1,2
ctl namespace host remove "$NQN" 1 "$HOST_A"
expect_nsids "$A" ""
for c in "$A:$A_ID" "$B:$B_ID"; do
  [ "$(cat /sys/class/nvme/"${c%%:*}"/cntlid 2>/dev/null)" = "${c#*:}" ] ||
    fail "$STEP: controller ${c%%:*} changed (a reconnect?)"
  [ "$(cat /sys/class/nvme/"${c%%:*}"/state 2>/dev/null)" = live ] ||
    fail "$STEP: controller ${c%%:*} is $(cat /sys/class/nvme/"${c%%:*}"/state 2>/dev/null)"
done
DEV1=$(ns_dev 1) || fail "$STEP: no block device for namespace 1 on host B"
check dd if="$DEV1" of="$WORK/back" bs=1M count=4 iflag=direct status=none
cmp -s "$WORK/pattern" "$WORK/back" || fail "$STEP: host B reads other data from namespace 1"
[ "$(nvme list-ns "/dev/$A" | grep -c .)" = 0 ] ||
  fail "$STEP: nvme list-ns /dev/$A still lists: $(nvme list-ns "/dev/$A" | paste -sd' ' -)"

step file
awk '/^nsid = 1$/ { p = 1 } p && /^hosts/ { print; exit }' "$WORK/target.toml" | tr -d ' ' |
  grep -qxF "hosts=[\"$HOST_B\"]" ||
  fail "$STEP: namespace 1's hosts in the file: $(grep -n hosts "$WORK/target.toml" | paste -sd' ' -)"

step stop
check nvme disconnect -n "$NQN"
kill -TERM "$TPID"; wait "$TPID"; rc=$?
TPID=
[ "$rc" = 0 ] || fail "$STEP: the target exited $rc"
echo "RESULT: PASS"
