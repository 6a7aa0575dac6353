#!/usr/bin/env bash
# idle-controllers-nvmet.sh - run INSIDE the VM, for tools/bench/idle-controllers (BENCH_NVMET=1):
# what connected but idle controllers cost the Linux kernel target (nvmet-tcp, or nvmet-rdma
# over rxe0 with NVMET_TRTYPE=rdma) in memory. nvmet on 127.0.0.1 (rdma: RXE_VM_IP,
# 10.0.2.15) with a null_blk namespace; the initiator's `idle` example connects
# CONTROLLERS controllers (an admin queue and one 128-deep I/O queue each) and holds them; the
# kernel's memory in use (MemTotal - MemAvailable, /proc/meminfo) is read before and with them
# all connected, and the host process's own resident memory is taken off it. Prints
# "nvmet: N controllers ... KiB per controller" and PASS, or FAIL.
#
#   RXE_VM_KPKG=linux-image-6.12.95+deb12-amd64 tools/rxe-vm/run-in-vm.sh \
#     bash tests/vm/idle-controllers-nvmet.sh
#
# Needs: build/release/examples/idle (or IDLE_BIN). Env: CONTROLLERS (200: the VM's emulated CPU
# connects a few a second), IDLE_BIN, NVMET_TRTYPE (tcp or rdma), RXE_VM_IP.
set -uo pipefail

HERE=$(cd "$(dirname "$0")/../.." && pwd)
IDLE=${IDLE_BIN:-$HERE/build/release/examples/idle}
N=${CONTROLLERS:-200}
NQN=nqn.2026-12.io.rdmablk:idle-nvmet
PORT=4420
CFG=/sys/kernel/config/nvmet
TR=${NVMET_TRTYPE:-tcp}
case $TR in
  tcp) ADDR=127.0.0.1 ;;
  rdma) ADDR=${RXE_VM_IP:-10.0.2.15} ;;
  *) echo "FAIL: NVMET_TRTYPE must be tcp or rdma (got '$TR')"; exit 1 ;;
esac
fail() { echo "FAIL: $*"; exit 1; }

[ -x "$IDLE" ] || fail "$IDLE missing: cargo build --release -p rdmablk-initiator --example idle"
case $N in '' | *[!0-9]*) fail "CONTROLLERS must be a whole number (got '$N')" ;; esac
ulimit -n $((4 * N + 1024)) || fail "cannot raise the open-file limit"
modprobe nvmet && modprobe "nvmet-$TR" || fail "modprobe nvmet nvmet-$TR"
modprobe null_blk nr_devices=1 gb=1 bs=4096 || fail "modprobe null_blk"
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config || fail "configfs"
S=$CFG/subsystems/$NQN P=$CFG/ports/1
mkdir "$S" && echo 1 >"$S/attr_allow_any_host" && mkdir "$S/namespaces/1" &&
  echo -n /dev/nullb0 >"$S/namespaces/1/device_path" && echo 1 >"$S/namespaces/1/enable" ||
  fail "nvmet subsystem with /dev/nullb0"
mkdir "$P" && echo "$TR" >"$P/addr_trtype" && echo ipv4 >"$P/addr_adrfam" &&
  echo "$ADDR" >"$P/addr_traddr" && echo $PORT >"$P/addr_trsvcid" &&
  ln -s "$S" "$P/subsystems/$NQN" || fail "nvmet port"
sleep 1

used() { awk '/^MemTotal:/ { t = $2 } /^MemAvailable:/ { a = $2 } END { print t - a }' /proc/meminfo; }
sync; echo 3 >/proc/sys/vm/drop_caches
used0=$(used)
out=/tmp/idle-nvmet.out
hold=$((60 + N))
"$IDLE" "$TR://$ADDR:$PORT/$NQN?io_queues=1&queue_size=128&buffer_pool_bytes=1048576" \
  "$hold" "$N" >"$out" 2>&1 &
HPID=$!
for _ in $(seq 1 $((10 * hold))); do
  grep -q '^connected' "$out" && break
  kill -0 $HPID 2>/dev/null || break
  sleep 0.1
done
grep -q '^connected' "$out" || { kill $HPID 2>/dev/null; fail "the host did not connect: $(tail -2 "$out")"; }
grep '^connected' "$out"
sleep 5
sync; echo 3 >/proc/sys/vm/drop_caches
used1=$(used)
host=$(awk '/^VmRSS:/ { print $2 }' /proc/$HPID/status)
kernel=$((used1 - used0 - host))
echo "nvmet-$TR: $N controllers: memory in use $used0 -> $used1 KiB, the host process $host KiB," \
  "nvmet and the kernel's host side $kernel KiB: $((kernel / N)) KiB per controller"
kill $HPID 2>/dev/null; wait $HPID 2>/dev/null
rm -f "$P/subsystems/$NQN"; rmdir "$P"
echo 0 >"$S/namespaces/1/enable"; rmdir "$S/namespaces/1" "$S"
echo PASS
