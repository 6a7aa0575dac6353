#!/usr/bin/env bash
# reservations.sh - NVMe reservations with the Linux host's nvme-cli against rdmablk-target.
# Run it INSIDE the rxe VM, from the repository root:
#
#   tools/rxe-vm/run-in-vm.sh bash tests/vm/reservations.sh
#   TRTYPE=tcp tools/rxe-vm/run-in-vm.sh bash tests/vm/reservations.sh
#
# Steps (a failure names its step):
#   054      blktests nvme/054's sequence (register, replace, unregister, acquire, preempt,
#            release, clear), the same nvme-cli commands on the namespace's block device, each
#            report filtered as 054 filters it; the output must equal blktests' own expected
#            output (tests/nvme/054.out of the blktests in BLKTESTS_SRC, its first and last
#            two lines aside, which are the harness's)
#   two-hosts  host A and host B (two connections with distinct host NQNs and host IDs, each
#            driven through its controller's character device): A registers and takes Write
#            Exclusive; B's write fails with Reservation Conflict, B's read succeeds; A masks
#            Registration Preempted (nvme set-feature 0x82, read back); B registers and
#            preempts A, and A's Reservation Notification log has no page; now A's write
#            fails and B's succeeds; B clears
#   persist  A registers asking to persist through power loss (--cptpl=3) and takes
#            Exclusive Access; the target is SIGKILLed and started again; after the hosts
#            connect anew, B's read is still refused and the report still shows A holding
#            it; A clears
#   gateways two rdmablk-target processes serve the same file and subsystem (ports PORT and
#            PORT+1, disjoint cntlids, `shared_reservations` in one directory); hosts A and B
#            each connect to both (native multipath: four controllers). A takes Write
#            Exclusive through gateway 1: B's writes fail through both gateways and B's read
#            does not; A writes through gateway 2. B preempts and aborts A through gateway 2:
#            A's writes fail through both. Then, five times, A (through gateway 1) and B
#            (through gateway 2) acquire Exclusive Access at once: exactly one succeeds
# Prints RESULT: PASS or FAIL.
#
# RESV_TARGET=nvmet runs the same steps against the Linux kernel target instead (nvmet with
# resv_enable, Linux 6.13 and later: the reference), but for `persist`: nvmet persists
# nothing (docs/conformance.md, "Reservations").
#
# Env: RDMABLK_TARGET (binary; default build/debug/rdmablk-target), RXE_VM_IP (10.0.2.15),
#      TRTYPE (rdma or tcp), PORT (4420), BLKTESTS_SRC (../shared/third_party/blktests),
#      RESV_TARGET (rdmablk or nvmet).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
IP=${RXE_VM_IP:-10.0.2.15}
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh"  # TRTYPE, nvme_connect
PORT=${PORT:-4420}
NQN=nqn.2026-11.io.rdmablk:vm-resv
UUID=91fdba0d-f87b-4c25-b80f-db7be1418b9e
HOST_A=nqn.2014-08.org.nvmexpress:uuid:72657376-0000-4000-8000-00000000000a
HOST_B=nqn.2014-08.org.nvmexpress:uuid:72657376-0000-4000-8000-00000000000b
EXPECTED=${BLKTESTS_SRC:-$ROOT/../shared/third_party/blktests}/tests/nvme/054.out
WORK=$(mktemp -d /tmp/rdmablk-resv.XXXXXX)
TPID=
declare -A GPID=()  # the gateways of step `gateways`
RESV_TARGET=${RESV_TARGET:-rdmablk}
CFS=/sys/kernel/config/nvmet
LOOP=

say() { echo "reservations: $*"; }
exec 3>&1
fail() {
  exec 1>&3 2>&3
  say "FAIL: $*"
  echo "----- target log (last 30 lines) -----"; tail -n 30 "$WORK/target.log" 2>/dev/null
  echo "----- dmesg (last 20 lines) -----"; dmesg | tail -n 20
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  [ -n "$TPID" ] && kill -TERM "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  for g in "${GPID[@]}"; do kill -TERM "$g" 2>/dev/null; done
  nvmet_down
  echo "RESULT: FAIL (step ${STEP:-setup}: $*)"
  exit 1
}
# The kernel target's subsystem, namespace (reservations enabled) and port, and their removal.
nvmet_up() {
  modprobe nvmet && modprobe "nvmet-$TRTYPE" || fail "modprobe nvmet nvmet-$TRTYPE"
  mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
  [ -d "$CFS" ] || fail "no $CFS"
  modprobe loop 2>/dev/null
  LOOP=$(losetup -f --show --sector-size 4096 "$WORK/ns.img") || fail "losetup"  # 4 KiB blocks, as rdmablk's
  local s=$CFS/subsystems/$NQN p=$CFS/ports/1
  mkdir "$s" && echo 1 >"$s/attr_allow_any_host" && mkdir "$s/namespaces/1" &&
    echo -n "$LOOP" >"$s/namespaces/1/device_path" &&
    echo "$UUID" >"$s/namespaces/1/device_uuid" || fail "nvmet subsystem"
  [ -e "$s/namespaces/1/resv_enable" ] || fail "this nvmet has no resv_enable (Linux 6.13+)"
  echo 1 >"$s/namespaces/1/resv_enable" && echo 1 >"$s/namespaces/1/enable" ||
    fail "nvmet namespace: $(dmesg | tail -3)"
  mkdir "$p" && echo "$TRTYPE" >"$p/addr_trtype" && echo ipv4 >"$p/addr_adrfam" &&
    echo "$IP" >"$p/addr_traddr" && echo "$PORT" >"$p/addr_trsvcid" &&
    ln -s "$s" "$p/subsystems/$NQN" || fail "nvmet port: $(dmesg | tail -3)"
  say "nvmet: $NQN on $TRTYPE $IP:$PORT, namespace 1 on $LOOP, resv_enable"
}
nvmet_down() {
  [ "$RESV_TARGET" = nvmet ] || return 0
  rm -f "$CFS/ports/1/subsystems/$NQN" 2>/dev/null
  rmdir "$CFS/ports/1" 2>/dev/null
  echo 0 >"$CFS/subsystems/$NQN/namespaces/1/enable" 2>/dev/null
  rmdir "$CFS/subsystems/$NQN/namespaces/1" "$CFS/subsystems/$NQN" 2>/dev/null
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
  LOOP=
}
STEP=setup
step() { STEP=$1; say "--- step $STEP (at ${SECONDS}s)"; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # start_target, ns_dev, connect_as, ctrl_of_host

[ "$RESV_TARGET" = nvmet ] || [ -x "$BIN" ] || fail "no target binary at $BIN (cargo build -p rdmablk-target)"
command -v nvme >/dev/null || fail "nvme-cli is missing"
[ -f "$EXPECTED" ] || fail "no blktests expected output at $EXPECTED (set BLKTESTS_SRC)"
if [ "$TRTYPE" = rdma ]; then
  ibv_devinfo -d rxe0 >/dev/null 2>&1 || fail "no rxe0 device (run inside the rxe VM)"
  LISTENER='provider = "verbs"'
else
  LISTENER="transport = \"$TRTYPE\""
fi
truncate -s 64M "$WORK/ns.img" || fail "truncate"

cat >"$WORK/target.toml" <<CFG
[[listener]]
$LISTENER
address = "$IP"
port = $PORT

[target]
worker_threads = 1
poll_mode = "interrupt"
state_dir = "$WORK/state"

[arena]
bytes = "64MiB"
lock = false

[limits]
max_queue_depth = 64
max_queues_per_controller = 3

[control]
socket = ""

[[subsystem]]
nqn = "$NQN"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
uuid = "$UUID"
backend = { kind = "file", path = "$WORK/ns.img" }
CFG
modprobe "nvme-$TRTYPE" || fail "modprobe nvme-$TRTYPE"
if [ "$RESV_TARGET" = nvmet ]; then nvmet_up; else start_target; fi

# ---------------------------------------------------------------- blktests nvme/054
step 054
check() { "$@" >"$WORK/cmd.out" 2>&1 || fail "$STEP: $* failed: $(tail -n 5 "$WORK/cmd.out")"; }
check nvme_connect -s "$PORT" -n "$NQN"
DEV=$(ns_dev 1) || fail "$STEP: no block device for namespace 1"
# 054 passes --eds where nvme-cli has it, else sets CDW11 bit 0 by hand.
EDS=--cdw11=1
HELP=$(nvme resv-report --help 2>&1 || true)   # (--help exits non-zero)
[[ $HELP == *--eds* ]] && EDS=--eds
report() { nvme resv-report "$DEV" "$EDS" | grep -v hostid | grep -E "gen|rtype|regctl|regctlext|cntlid|rcsts|rkey"; }
{
  echo Register; report
  nvme resv-register "$DEV" --nrkey=4 --rrega=0; report
  echo Replace
  nvme resv-register "$DEV" --crkey=4 --nrkey=5 --rrega=2; report
  echo Unregister
  nvme resv-register "$DEV" --crkey=5 --rrega=1; report
  echo Acquire
  nvme resv-register "$DEV" --nrkey=4 --rrega=0
  nvme resv-acquire "$DEV" --crkey=4 --rtype=1 --racqa=0; report
  echo Preempt
  nvme resv-acquire "$DEV" --crkey=4 --rtype=2 --racqa=1; report
  echo Release
  nvme resv-release "$DEV" --crkey=4 --rtype=2 --rrela=0; report
  echo Clear
  nvme resv-register "$DEV" --nrkey=4 --rrega=0
  nvme resv-acquire "$DEV" --crkey=4 --rtype=1 --racqa=0; report
  nvme resv-release "$DEV" --crkey=4 --rrela=1
} >"$WORK/054.got" 2>&1
# blktests' expected output without the harness's lines (the first, "Running nvme/054", and
# the last two, the disconnect and "Test complete").
sed '1d' "$EXPECTED" | head -n -2 >"$WORK/054.want"
if ! diff -u "$WORK/054.want" "$WORK/054.got" >"$WORK/054.diff"; then
  cat "$WORK/054.diff"
  fail "$STEP: the output differs from blktests' 054.out (diff above)"
fi
say "054: $(grep -c . "$WORK/054.got") lines, as blktests expects"
check nvme disconnect -n "$NQN"

# ---------------------------------------------------------------- two hosts
step two-hosts
connect_as "$HOST_A" 72657376-0000-4000-8000-00000000000a
connect_as "$HOST_B" 72657376-0000-4000-8000-00000000000b
A=/dev/$(ctrl_of_host "$HOST_A") || fail "$STEP: no controller for host A"
B=/dev/$(ctrl_of_host "$HOST_B") || fail "$STEP: no controller for host B"
# Each host's commands through its own controller (I/O commands on the controller's device,
# namespace 1).
dd if=/dev/urandom of="$WORK/block" bs=4096 count=1 status=none
io() { # io CTRL read|write: one 4 KiB command at LBA 0 (block size 4096)
  if [ "$2" = write ]; then
    nvme io-passthru "$1" --namespace-id=1 --opcode=0x01 --data-len=4096 --write \
      --input-file="$WORK/block" --cdw10=0 --cdw11=0 --cdw12=0
  else
    nvme io-passthru "$1" --namespace-id=1 --opcode=0x02 --data-len=4096 --read \
      --cdw10=0 --cdw11=0 --cdw12=0 >/dev/null
  fi
}
expect_ok() { "$@" >"$WORK/io.out" 2>&1 || fail "$STEP: $* failed: $(tail -n 3 "$WORK/io.out")"; }
expect_conflict() {
  "$@" >"$WORK/io.out" 2>&1 && fail "$STEP: $* succeeded; a reservation conflict was expected"
  grep -qi "reservation.conflict\|0x83\b\|RESERVATION_CONFLICT" "$WORK/io.out" ||
    fail "$STEP: $* failed, but not with Reservation Conflict: $(tail -n 3 "$WORK/io.out")"
}
expect_ok nvme resv-register "$A" --namespace-id=1 --nrkey=1 --rrega=0
expect_ok nvme resv-acquire "$A" --namespace-id=1 --crkey=1 --rtype=1 --racqa=0
expect_ok io "$A" write
expect_conflict io "$B" write
expect_ok io "$B" read
expect_ok nvme resv-register "$B" --namespace-id=1 --nrkey=2 --rrega=0
# A masks Registration Preempted (Features 0x82, bit 1): B's preempt leaves no page on A's log.
expect_ok nvme set-feature "$A" --namespace-id=1 --feature-id=0x82 --value=2
nvme get-feature "$A" --namespace-id=1 --feature-id=0x82 >"$WORK/mask.txt" 2>&1 ||
  fail "$STEP: get-feature 0x82: $(tail -n 3 "$WORK/mask.txt")"
grep -qi "current value:.*0x0*2\b\|value:0x0*2\b\|: 0x0*2\b" "$WORK/mask.txt" ||
  fail "$STEP: Features 0x82 does not read back 2: $(tr '\n' ' ' <"$WORK/mask.txt")"
expect_ok nvme resv-acquire "$B" --namespace-id=1 --crkey=2 --prkey=1 --rtype=1 --racqa=1
# The log page's 64 bytes, as hex pairs after each dump line's offset (nvme-cli's layout).
resv_log() {
  nvme get-log "$1" --namespace-id=0xffffffff --log-id=0x80 --log-len=64 2>&1 |
    sed -n 's/^ *[0-9a-f]*: //p' | cut -c1-47 | tr -s ' ' '\n' | grep -v '^$'
}
[ "$(resv_log "$A" | grep -vc '^00$')" = 0 ] && [ "$(resv_log "$A" | grep -c .)" = 64 ] ||
  fail "$STEP: a masked notice made a log page: $(resv_log "$A" | tr '\n' ' ')"
expect_conflict io "$A" write
expect_ok io "$B" write
nvme resv-report "$A" --namespace-id=1 "$EDS" >"$WORK/report.txt" 2>&1 ||
  fail "$STEP: resv-report: $(tail -n 3 "$WORK/report.txt")"
grep -q "regctl *: 1" "$WORK/report.txt" || fail "$STEP: report after the preempt: $(cat "$WORK/report.txt")"
expect_ok nvme resv-release "$B" --namespace-id=1 --crkey=2 --rrela=1
expect_ok io "$A" write

# ---------------------------------------------------------------- persist through power loss
if [ "$RESV_TARGET" = nvmet ]; then
  check nvme disconnect -n "$NQN"
  nvmet_down
  say "persist: skipped against nvmet (it persists nothing)"
  echo "RESULT: PASS"
  exit 0
fi
step persist
expect_ok nvme resv-register "$A" --namespace-id=1 --nrkey=7 --rrega=0 --cptpl=3
expect_ok nvme resv-acquire "$A" --namespace-id=1 --crkey=7 --rtype=2 --racqa=0
expect_conflict io "$B" read
kill -KILL "$TPID"; wait "$TPID" 2>/dev/null
TPID=
check nvme disconnect -n "$NQN"
start_target
connect_as "$HOST_A" 72657376-0000-4000-8000-00000000000a
connect_as "$HOST_B" 72657376-0000-4000-8000-00000000000b
A=/dev/$(ctrl_of_host "$HOST_A") || fail "$STEP: no controller for host A after the restart"
B=/dev/$(ctrl_of_host "$HOST_B") || fail "$STEP: no controller for host B after the restart"
expect_conflict io "$B" read
nvme resv-report "$B" --namespace-id=1 "$EDS" >"$WORK/report.txt" 2>&1 ||
  fail "$STEP: resv-report: $(tail -n 3 "$WORK/report.txt")"
grep -q "rtype *: 2" "$WORK/report.txt" && grep -q "rkey *: 7" "$WORK/report.txt" ||
  fail "$STEP: the reservation did not survive the restart: $(tr '\n' ' ' <"$WORK/report.txt")"
expect_ok nvme resv-release "$A" --namespace-id=1 --crkey=7 --rrela=1
expect_ok io "$B" write
check nvme disconnect -n "$NQN"

step stop
kill -TERM "$TPID"; wait "$TPID"; rc=$?
TPID=
[ "$rc" = 0 ] || fail "$STEP: the target exited $rc"

# ---------------------------------------------------------------- two gateways
step gateways
gateway() { # gateway N PORT CNTLID_MIN: gateway N's configuration, started; waits for ready
  sed -e "s/^port = .*/port = $2/" -e "s|^state_dir = .*||" \
    -e "s/^allow_any_host = true/allow_any_host = true\ncntlid_min = $3\ncntlid_max = $(($3 + 998))/" \
    -e "s|^backend = |shared_reservations = \"$WORK/shared\"\nbackend = |" \
    "$WORK/target.toml" >"$WORK/g$1.toml"
  RUST_LOG=${RUST_LOG:-info} "$BIN" --config "$WORK/g$1.toml" >"$WORK/g$1.out" 2>>"$WORK/target.log" &
  GPID[$1]=$!
  for _ in $(seq 1 600); do
    grep -q '^ready$' "$WORK/g$1.out" 2>/dev/null && return 0
    kill -0 "${GPID[$1]}" 2>/dev/null || fail "$STEP: gateway $1 exited at start"
    sleep 0.1
  done
  fail "$STEP: gateway $1 did not print ready within 60 s"
}
# ctrl_of_host_at HOSTNQN PORT: HOSTNQN's controller of $NQN through the gateway at PORT.
ctrl_of_host_at() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    [ "$(cat "$c/hostnqn" 2>/dev/null)" = "$1" ] || continue
    grep -q "trsvcid=$2" "$c/address" 2>/dev/null || continue
    echo "/dev/${c##*/}"; return 0
  done
  return 1
}
P1=$PORT P2=$((PORT + 1))
gateway 1 "$P1" 1
gateway 2 "$P2" 1000
for p in "$P1" "$P2"; do
  PORT=$p connect_as "$HOST_A" 72657376-0000-4000-8000-00000000000a
  PORT=$p connect_as "$HOST_B" 72657376-0000-4000-8000-00000000000b
done
A1=$(ctrl_of_host_at "$HOST_A" "$P1") && A2=$(ctrl_of_host_at "$HOST_A" "$P2") &&
  B1=$(ctrl_of_host_at "$HOST_B" "$P1") && B2=$(ctrl_of_host_at "$HOST_B" "$P2") ||
  fail "$STEP: not every host has a controller through both gateways"
say "gateway 1: A $A1, B $B1; gateway 2: A $A2, B $B2"
expect_ok nvme resv-register "$A1" --namespace-id=1 --nrkey=1 --rrega=0
expect_ok nvme resv-acquire "$A1" --namespace-id=1 --crkey=1 --rtype=1 --racqa=0
expect_conflict io "$B2" write
expect_conflict io "$B1" write
expect_ok io "$B2" read
expect_ok io "$A2" write
expect_ok nvme resv-register "$B2" --namespace-id=1 --nrkey=2 --rrega=0
expect_ok nvme resv-acquire "$B2" --namespace-id=1 --crkey=2 --prkey=1 --rtype=1 --racqa=2
expect_conflict io "$A1" write
expect_conflict io "$A2" write
expect_ok io "$B1" write
for c in "$A1" "$B2"; do
  nvme resv-report "$c" --namespace-id=1 "$EDS" >"$WORK/report.txt" 2>&1 ||
    fail "$STEP: resv-report through $c: $(tail -n 3 "$WORK/report.txt")"
  grep -q "regctl *: 1" "$WORK/report.txt" && grep -q "rkey *: 2" "$WORK/report.txt" ||
    fail "$STEP: report through $c after the preempt: $(tr '\n' ' ' <"$WORK/report.txt")"
done
expect_ok nvme resv-release "$B1" --namespace-id=1 --crkey=2 --rrela=1
expect_ok nvme resv-register "$A1" --namespace-id=1 --nrkey=1 --rrega=0
expect_ok nvme resv-register "$B2" --namespace-id=1 --nrkey=2 --rrega=0
for round in 1 2 3 4 5; do
  nvme resv-acquire "$A1" --namespace-id=1 --crkey=1 --rtype=2 --racqa=0 >"$WORK/race-a" 2>&1 &
  ra=$!
  nvme resv-acquire "$B2" --namespace-id=1 --crkey=2 --rtype=2 --racqa=0 >"$WORK/race-b" 2>&1 &
  rb=$!
  wait "$ra"; a=$?
  wait "$rb"; b=$?
  if [ "$a" = 0 ] && [ "$b" != 0 ]; then winner=A; key=1; ctrl=$A1
  elif [ "$b" = 0 ] && [ "$a" != 0 ]; then winner=B; key=2; ctrl=$B2
  else fail "$STEP: round $round: A exited $a, B exited $b: exactly one acquire must succeed"
  fi
  grep -qi "conflict" "$WORK/race-a" "$WORK/race-b" ||
    fail "$STEP: round $round: the loser did not get Reservation Conflict"
  say "race $round: $winner won"
  expect_ok nvme resv-release "$ctrl" --namespace-id=1 --crkey=$key --rtype=2 --rrela=0
done
for p in "$P1" "$P2"; do
  for h in "$HOST_A" "$HOST_B"; do
    c=$(ctrl_of_host_at "$h" "$p") && echo 1 >"/sys/class/nvme/${c#/dev/}/delete_controller"
  done
done
for g in 1 2; do
  kill -TERM "${GPID[$g]}"; wait "${GPID[$g]}"; rc=$?
  [ "$rc" = 0 ] || fail "$STEP: gateway $g exited $rc"
done
echo "RESULT: PASS"
