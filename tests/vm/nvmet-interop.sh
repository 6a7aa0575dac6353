#!/usr/bin/env bash
# nvmet-interop.sh - run INSIDE the Soft-RoCE VM: export a file-backed namespace through the
# Linux kernel target (nvmet-rdma on rxe0, or nvmet-tcp with NVMET_TRTYPE=tcp), then connect
# rdmablk-initiator to it (rdma:// over verbs, or tcp://) and do verified I/O (the `verify`
# example: every power-of-two size from one block to 1 MiB, sync + zero-copy + async, flush);
# then, against the same nvmet port:
#   - discovery: rdmablk-perf given only HOST:PORT finds the subsystem in nvmet's discovery
#     log and connects to its entry over the same transport (verified randrw);
#   - keep-alive: the `idle` example with kato_ms=2000 stays idle 12 s (6 KATOs) and keeps the
#     controller it connected (no reconnect), its keep-alives accepted by nvmet;
#   - a reset of the nvmet port under I/O: rdmablk-perf (verified randrw, QD16) while the
#     subsystem is unlinked from the port for 3 s (nvmet deletes its controllers and closes the
#     port) and linked again: the run ends with zero errors and zero verify failures, and the
#     initiator logged its reconnect (the reset did hit it).
#
#   tools/rxe-vm/run-in-vm.sh bash tests/vm/nvmet-interop.sh      (from the repository root)
#   NVMET_TRTYPE=tcp tools/rxe-vm/run-in-vm.sh bash tests/vm/nvmet-interop.sh
#
# Needs: build/debug/examples/{verify,idle} (cargo build -p rdmablk-initiator --example verify
#        --example idle) and build/debug/rdmablk-perf (cargo build -p rdmablk-tools --bin
#        rdmablk-perf), or VERIFY_BIN / IDLE_BIN / PERF_BIN; python3 (the backing-store and
#        report checks). A missing tool is a FAIL.
#        Prints PASS/FAIL; exit status 0 only on PASS.
set -uo pipefail

IP=${NVMET_IP:-10.0.2.15}
TR=${NVMET_TRTYPE:-rdma}
PORT=${NVMET_PORT:-4420}
NQN=${NVMET_NQN:-nqn.2024-01.io.rdmablk:interop}
NS_MB=${NVMET_NS_MB:-64}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${VERIFY_BIN:-$HERE/build/debug/examples/verify}
IDLE=${IDLE_BIN:-$HERE/build/debug/examples/idle}
PERF=${PERF_BIN:-$HERE/build/debug/rdmablk-perf}
CFG=/sys/kernel/config/nvmet
IMG=/tmp/rdmablk-nvmet-ns.img
LOOP=  # set below; cleanup must not take a LOOP from the environment

fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $* (at ${SECONDS}s)"; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # perf_ok

[ -x "$BIN" ] || fail "$BIN missing: cargo build -p rdmablk-initiator --example verify"
[ -x "$IDLE" ] || fail "$IDLE missing: cargo build -p rdmablk-initiator --example idle"
[ -x "$PERF" ] || fail "$PERF missing: cargo build -p rdmablk-tools --bin rdmablk-perf"
[ "$(id -u)" = 0 ] || fail "must run as root (inside the VM)"
command -v python3 >/dev/null || fail "python3 is missing (the backing-store check needs it)"

step "kernel target: modprobe nvmet nvmet-$TR"
modprobe nvmet || fail "modprobe nvmet"
modprobe "nvmet-$TR" || fail "modprobe nvmet-$TR"
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config \
  || fail "mount configfs"
[ -d "$CFG" ] || fail "$CFG missing after modprobe"
ibv_devices 2>/dev/null | grep rxe0 >/dev/null || echo "warning: rxe0 not listed by ibv_devices"

cleanup() {
  rm -f "$CFG/ports/1/subsystems/$NQN" 2>/dev/null
  rmdir "$CFG/ports/1" 2>/dev/null
  echo 0 > "$CFG/subsystems/$NQN/namespaces/1/enable" 2>/dev/null
  rmdir "$CFG/subsystems/$NQN/namespaces/1" 2>/dev/null
  rmdir "$CFG/subsystems/$NQN" 2>/dev/null
  [ -n "${LOOP:-}" ] && losetup -d "$LOOP" 2>/dev/null
  rm -f "$IMG" /tmp/rdmablk-interop-perf.*
}
trap cleanup EXIT

truncate -s "${NS_MB}M" "$IMG" || fail "create $IMG"
# A loop device with 512-byte sectors gives a 512-byte-block namespace (nvmet's block
# backend), so sizes from 512 B up are exercised; without losetup, the file backend (4 KiB).
modprobe loop 2>/dev/null
LOOP=$(losetup -f --show --sector-size 512 "$IMG" 2>/dev/null || true)
DEV=${LOOP:-$IMG}
step "subsystem $NQN, namespace 1 = ${NS_MB} MiB on tmpfs via ${LOOP:-file backend}"
S=$CFG/subsystems/$NQN
mkdir "$S" || fail "mkdir $S"
echo 1 > "$S/attr_allow_any_host" || fail "allow_any_host"
mkdir "$S/namespaces/1" || fail "mkdir namespace"
echo -n "$DEV" > "$S/namespaces/1/device_path" || fail "device_path"
# tmpfs has no O_DIRECT: the file backend must use buffered I/O.
[ -z "$LOOP" ] && { echo 1 > "$S/namespaces/1/buffered_io" 2>/dev/null || true; }
echo 1 > "$S/namespaces/1/enable" || fail "enable namespace (dmesg: $(dmesg | tail -3))"

step "port 1: $TR $IP:$PORT"
P=$CFG/ports/1
mkdir "$P" || fail "mkdir port"
echo "$TR" > "$P/addr_trtype"
echo ipv4 > "$P/addr_adrfam"
echo "$IP" > "$P/addr_traddr"
echo "$PORT" > "$P/addr_trsvcid"
ln -s "$S" "$P/subsystems/$NQN" || fail "link subsystem to port (dmesg: $(dmesg | tail -3))"
# nvmet enables the port inside the link (it listens when ln returns) and says so in dmesg.
for _ in $(seq 1 100); do dmesg | grep "enabling port 1" >/dev/null && break; sleep 0.1; done
dmesg | grep -i nvmet | tail -3

rc=0
step "rdmablk-initiator -> nvmet-$TR: $TR://$IP:$PORT/$NQN"
RUST_LOG=${RUST_LOG:-info} timeout 600 "$BIN" "$TR://$IP:$PORT/$NQN" || rc=$?
if [ $rc -ne 0 ]; then
  echo "--- dmesg (nvmet) ---"; dmesg | grep -iE "nvme|rdma|rxe" | tail -20
  fail "verify exited $rc"
fi

step "a refused connection names its cause (unknown subsystem NQN)"
out=$(timeout 120 "$BIN" "$TR://$IP:$PORT/nqn.2024-01.io.rdmablk:no-such-subsys" 2>&1)
echo "$out" | tail -1
grep -q "unknown subsystem NQN" <<<"$out" || fail "unknown-NQN refusal not reported as such"

step "the target's backing store holds what the initiator wrote (last pass: 64 KiB at 0)"
sync
python3 - "$DEV" <<'PY' || fail "backing store differs from the written pattern"
import sys
want = bytes(((x ^ (x >> 9) ^ (x >> 17)) & 0xFF) ^ ((2 * 0x5B) & 0xFF) for x in range(65536))
with open(sys.argv[1], "rb") as f:
    got = f.read(65536)
if got != want:
    i = next(i for i in range(65536) if got[i] != want[i])
    print(f"mismatch at byte {i}: want {want[i]:#04x} got {got[i]:#04x}")
    sys.exit(1)
print("backing store: 64 KiB match")
PY

step "discovery: rdmablk-perf $TR://$IP:$PORT/ (no NQN: nvmet's discovery log names the subsystem)"
out=/tmp/rdmablk-interop-perf.discovery
RUST_LOG=info timeout 300 "$PERF" "$TR://$IP:$PORT/" --rw randrw --bs 4k --iodepth 8 --size 2m \
  --verify crc32c --json -q > "$out.json" 2> "$out.log"
prc=$?
tail -n 3 "$out.log"
[ $prc = 0 ] || fail "rdmablk-perf through discovery exited $prc"
grep -q "$NQN" "$out.log" "$out.json" || fail "rdmablk-perf did not name the discovered subsystem $NQN"
perf_ok "$out.json" || fail "rdmablk-perf through discovery: bad report"

step "keep-alive: idle 12 s with kato_ms=2000 (nvmet drops a controller silent for KATO)"
out=$(timeout 120 "$IDLE" "$TR://$IP:$PORT/$NQN?kato_ms=2000" 12 2>&1)
echo "$out" | tail -n 3
grep -q '^PASS' <<<"$out" || fail "the idle controller did not survive 6 KATOs"
ka=$(echo "$out" | sed -n 's/^keep-alives \([0-9]*\) .*/\1/p')
[ "${ka:-0}" -ge 4 ] || fail "only ${ka:-0} keep-alives in 12 s at KATO 2 s"

step "a reset of the nvmet port under I/O (subsystem unlinked 3 s, linked again)"
out=/tmp/rdmablk-interop-perf.reset
RUST_LOG=info timeout 300 "$PERF" "$TR://$IP:$PORT/$NQN?reconnect_delay_ms=200" --rw randrw \
  --bs 4k --iodepth 16 --runtime 20 --verify crc32c --json -q > "$out.json" 2> "$out.log" &
PP=$!
sleep 6
kill -0 $PP 2>/dev/null || { tail -n 5 "$out.log"; fail "rdmablk-perf ended before the reset"; }
rm "$P/subsystems/$NQN" || fail "unlink the subsystem from the port"
sleep 3
ln -s "$S" "$P/subsystems/$NQN" || fail "link the subsystem to the port again"
wait $PP; prc=$?
grep -E 'reconnect|failed' "$out.log" | tail -n 4
[ $prc = 0 ] || { tail -n 10 "$out.log"; fail "rdmablk-perf across the port reset exited $prc"; }
perf_ok "$out.json" || fail "rdmablk-perf across the port reset: bad report"
grep -q 'controller reconnected' "$out.log" || fail "no reconnect logged: the port reset did not reach the initiator"

echo PASS
