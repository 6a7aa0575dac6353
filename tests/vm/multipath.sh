#!/usr/bin/env bash
# multipath.sh - high availability proof: the Linux host's native NVMe multipath over two
# rdmablk-target processes ("gateways") that export one subsystem with one namespace on a
# shared file, with ANA. Run it INSIDE the rxe VM, from the repository root:
#
#   tools/rxe-vm/run-in-vm.sh bash tests/vm/multipath.sh
#   TRTYPE=tcp ... tests/vm/multipath.sh     the same over NVMe/TCP (tools/test-rxe: on 6.12)
#
# Gateway A listens on $IP:4420 and reports ANA group 1 optimized; gateway B on $IP:4421
# reports it non-optimized. Same subsystem NQN, same namespace UUID, disjoint cntlid ranges.
# Steps (a failure names its step):
#   join       the host connects to both: ONE nvme subsystem for the NQN (sysfs
#              nvme-subsystem) holding both controllers, each with a path to the namespace,
#              and one head, the only /dev/nvmeXnY of the NQN
#   ana        each path's ana_state in sysfs is what its gateway reports, and I/O goes only
#              through the optimized path (the paths' own write counters)
#   failover   fio crc32c verify on the multipath device; SIGKILL A mid-run: fio finishes with
#              no error through B; the longest completion (the failover stall) is reported,
#              and must be under 2 x KATO
#   return     A restarted: the host reconnects to it and its path is optimized again
#   flip       A inaccessible, B optimized by editing both configs + SIGHUP: the host follows
#              (sysfs), and verified I/O goes only through B
# Prints "failover stall: N ms (goal < 2 x KATO = M ms)" and RESULT: PASS or FAIL (a stall of
# 2 x KATO or more fails the failover step).
#
# Env: RDMABLK_TARGET (binary; default build/debug/rdmablk-target), RXE_VM_IP (10.0.2.15),
#      FIO_SIZE (48m), TRTYPE (rdma: the gateways listen on rxe0; tcp: NVMe/TCP listeners).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
IP=${RXE_VM_IP:-10.0.2.15}
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh"  # TRTYPE, nvme_connect
NQN=nqn.2026-11.io.rdmablk:vm-multipath
UUID=6d756c74-6970-4174-8800-000000000001
KATO_S=5
FIO_SIZE=${FIO_SIZE:-48m}
WORK=$(mktemp -d /tmp/rdmablk-mp.XXXXXX)
declare -A PID=()

say() { echo "multipath: $*"; }
exec 3>&1
fail() {
  exec 1>&3 2>&3
  say "FAIL: $*"
  for g in a b; do
    echo "----- gateway $g log (last 30 lines) -----"; tail -n 30 "$WORK/$g.log" 2>/dev/null
  done
  echo "----- dmesg (last 50 lines) -----"; dmesg | tail -n 50
  cleanup
  echo "RESULT: FAIL (step ${STEP:-setup}: $*)"
  exit 1
}
cleanup() {
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  for g in "${!PID[@]}"; do kill -TERM "${PID[$g]}" 2>/dev/null; wait "${PID[$g]}" 2>/dev/null; done
  PID=()
}
STEP=setup
step() { STEP=$1; say "--- step $STEP (at ${SECONDS}s)"; }

[ -x "$BIN" ] || fail "no target binary at $BIN (cargo build -p rdmablk-target)"
command -v nvme >/dev/null || fail "nvme-cli is missing"
command -v fio >/dev/null || fail "fio is missing"
if [ "$TRTYPE" = rdma ]; then
  ibv_devinfo -d rxe0 >/dev/null 2>&1 || fail "no rxe0 device (run inside the rxe VM)"
  LISTENER='provider = "verbs"'
else
  LISTENER="transport = \"$TRTYPE\""
fi
truncate -s 128M "$WORK/shared.img" || fail "truncate the shared image"

# config G PORT CNTLID_MIN CNTLID_MAX STATE: gateway G's configuration file.
config() {
  cat >"$WORK/$1.toml" <<CFG
[[listener]]
$LISTENER
address = "$IP"
port = $2
ana = { 1 = "$5" }

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
max_queues_per_controller = 4

[control]
socket = ""

[[subsystem]]
nqn = "$NQN"
allow_any_host = true
cntlid_min = $3
cntlid_max = $4

[[subsystem.namespace]]
nsid = 1
uuid = "$UUID"
ana_group = 1
backend = { kind = "file", path = "$WORK/shared.img" }
CFG
}

# start G: starts gateway G with its configuration; waits for its `ready` line.
start() {
  RUST_LOG=${RUST_LOG:-info} "$BIN" --config "$WORK/$1.toml" >"$WORK/$1.out" 2>>"$WORK/$1.log" &
  PID[$1]=$!
  for _ in $(seq 1 300); do
    grep -q '^ready$' "$WORK/$1.out" 2>/dev/null && return 0
    kill -0 "${PID[$1]}" 2>/dev/null || fail "gateway $1 exited at start"
    sleep 0.1
  done
  fail "gateway $1 did not print ready within 30 s"
}

# ctrl_at PORT: the controller (nvmeX) of $NQN connected to $IP:PORT.
ctrl_at() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    grep -q "trsvcid=$1" "$c/address" 2>/dev/null || continue
    basename "$c"; return 0
  done
  return 1
}

# path_state PORT: the ana_state of the namespace path through the controller at PORT.
path_state() {
  local c p
  c=$(ctrl_at "$1") || return 1
  [ "$(cat "/sys/class/nvme/$c/state" 2>/dev/null)" = live ] || { echo "$(cat "/sys/class/nvme/$c/state")"; return 0; }
  for p in /sys/class/nvme/"$c"/nvme*c*n1; do
    [ -e "$p/ana_state" ] && { cat "$p/ana_state"; return 0; }
  done
  return 1
}

# wait_state PORT STATE [SECONDS]: until the path through PORT reports STATE.
wait_state() {
  local i s
  for i in $(seq 1 $((${3:-30} * 10))); do
    s=$(path_state "$1" 2>/dev/null)
    [ "$s" = "$2" ] && return 0
    sleep 0.1
  done
  fail "the path through port $1 is '${s:-none}', wanted '$2'"
}

# path_writes PORT: write requests completed through the path of the controller at PORT
# (the path's hidden gendisk's stat, field 5).
path_writes() {
  local c p
  c=$(ctrl_at "$1") || fail "no controller at port $1"
  for p in /sys/class/nvme/"$c"/nvme*c*n1; do
    [ -e "$p/stat" ] && { awk '{ print $5 }' "$p/stat"; return; }
  done
  fail "no path device under /sys/class/nvme/$c"
}

# io_goes_to PORT OTHER NAME: a short verified write; every write went through PORT's path.
io_goes_to() {
  local a0 b0 a1 b1
  a0=$(path_writes "$1"); b0=$(path_writes "$2")
  fio_verify "$3" --size=4m --output="$WORK/$3.txt" || { cat "$WORK/$3.txt"; fail "fio $3"; }
  a1=$(path_writes "$1"); b1=$(path_writes "$2")
  say "writes through port $1: $((a1 - a0)), through port $2: $((b1 - b0))"
  [ $((a1 - a0)) -gt 0 ] && [ $((b1 - b0)) = 0 ] ||
    fail "I/O did not go (only) to the path through port $1"
}

# The multipath head: the block device whose subsystem is $NQN.
head_dev() {
  local b
  for b in /sys/block/nvme*n1; do
    [[ $(basename "$b") =~ ^nvme[0-9]+n1$ ]] || continue
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    echo "/dev/$(basename "$b")"; return 0
  done
  return 1
}

fio_verify() { # NAME [extra fio args]: crc32c write+verify of the head device
  local name=$1; shift
  # SIGPIPE ignored: over NVMe/TCP a gateway killed under the host's send signals the submitter
  # (fio) with SIGPIPE (tests/vm/linux-host-steps.sh's fio_bg says why).
  (trap '' PIPE; cd "$WORK" && exec fio --name="$name" --filename="$DEV" --direct=1 --ioengine=libaio \
    --iodepth=16 --bs=16k --rw=randwrite --size="$FIO_SIZE" --randrepeat=1 --randseed=7 \
    --verify=crc32c --verify_fatal=1 --do_verify=1 "$@")
}

modprobe "nvme-$TRTYPE" || fail "modprobe nvme-$TRTYPE"
[ "$(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)" = Y ] ||
  fail "the host's native multipath is off (nvme_core.multipath=N)"
config a 4420 1 999 optimized
config b 4421 1000 1999 non-optimized
start a
start b

step join
for port in 4420 4421; do
  nvme_connect -s "$port" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120 \
    --keep-alive-tmo=$KATO_S >"$WORK/connect-$port.txt" 2>&1 ||
    { cat "$WORK/connect-$port.txt"; fail "nvme connect to port $port"; }
done
CA=$(ctrl_at 4420) || fail "no controller to port 4420"
CB=$(ctrl_at 4421) || fail "no controller to port 4421"
for _ in $(seq 1 100); do DEV=$(head_dev) && break; sleep 0.1; done
[ -n "${DEV:-}" ] || fail "no multipath block device for $NQN"
# ONE nvme subsystem for the NQN with both controllers under it, each with its path to the
# namespace, and one head in it, $DEV, the only block device of the NQN (one_head polls).
one_head "$NQN" 2 1
SUBSYS=$ONE_HEAD_SUBSYS
[ -e "$SUBSYS/$CA" ] && [ -e "$SUBSYS/$CB" ] || fail "$CA and $CB are not both in ${SUBSYS##*/}"
[ -e "$SUBSYS/${DEV#/dev/}" ] || fail "the head in ${SUBSYS##*/} is not $DEV"
say "controllers $CA (A, cntlid $(cat /sys/class/nvme/$CA/cntlid)) and $CB (B, cntlid" \
  "$(cat /sys/class/nvme/$CB/cntlid)) in ${SUBSYS##*/} under one head $DEV"

step ana
wait_state 4420 optimized 10
wait_state 4421 non-optimized 10
say "paths: A $(path_state 4420), B $(path_state 4421)"
io_goes_to 4420 4421 optimized-first

step failover
fio_verify failover --output-format=json --output="$WORK/failover.json" &
FIO=$!
sleep 3
kill -0 "$FIO" 2>/dev/null || fail "fio ended before the kill (raise FIO_SIZE)"
say "SIGKILL gateway A (pid ${PID[a]}) under fio"
kill -KILL "${PID[a]}"; wait "${PID[a]}" 2>/dev/null; unset 'PID[a]'
wait "$FIO" || { cat "$WORK/failover.json"; fail "fio saw an error after gateway A died"; }
STALL_MS=$(python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"][0]
m=max(j[d]["clat_ns"]["max"] for d in ("read","write"))
print(int(m/1e6))' "$WORK/failover.json") || fail "cannot read fio's JSON"
ERRS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["error"])' \
  "$WORK/failover.json")
[ "$ERRS" = 0 ] || fail "fio reports error $ERRS"
say "failover stall: $STALL_MS ms (goal < 2 x KATO = $((2 * KATO_S * 1000)) ms)"
[ "$STALL_MS" -lt $((2 * KATO_S * 1000)) ] ||
  fail "the failover stall, $STALL_MS ms, is not under 2 x KATO ($((2 * KATO_S * 1000)) ms)"
fio_verify failover --verify_only=1 --output="$WORK/verify-after.txt" ||
  { cat "$WORK/verify-after.txt"; fail "data written through the failover does not verify"; }

step return
start a
wait_state 4420 optimized 60
say "A is back: paths A $(path_state 4420), B $(path_state 4421)"

step flip
config a 4420 1 999 inaccessible
config b 4421 1000 1999 optimized
kill -HUP "${PID[a]}" "${PID[b]}"
wait_state 4420 inaccessible 30
wait_state 4421 optimized 30
say "after the flip: paths A $(path_state 4420), B $(path_state 4421)"
io_goes_to 4421 4420 flip

step teardown
nvme disconnect -n "$NQN" >/dev/null 2>&1 || fail "nvme disconnect"
for g in a b; do
  kill -TERM "${PID[$g]}"; wait "${PID[$g]}"; rc=$?
  [ "$rc" = 0 ] || fail "gateway $g exited with $rc on SIGTERM"
done
PID=()
rm -rf "$WORK"
echo "RESULT: PASS"
