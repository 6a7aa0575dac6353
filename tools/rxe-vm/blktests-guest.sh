#!/usr/bin/env bash
# blktests-guest.sh - runs INSIDE the rxe VM (started by tools/blktests): blktests' nvme tests
# over nvme-rdma on Soft-RoCE (TRTYPE=rdma) or over nvme-tcp on loopback (TRTYPE=tcp),
# against each target named in $TARGETS, one `./check` each.
#   nvmet:   Linux's nvmet-rdma / nvmet-tcp, which blktests configures itself (configfs);
#   rdmablk: rdmablk-target (verbs provider on $RXE_ADDR:4420, or a tcp listener on
#            127.0.0.1:4420; control socket), driven through
#            NVME_TARGET_CONTROL=tools/blktests-target-control.
# Per target T: $OUT/T/<NNN>.out (check's output), $OUT/T/results (blktests' result files),
# and one line per test in $OUT/T.results: "nvme/NNN <check rc> <phase seconds> <connects>",
# where host connects counts the kernel's "new ctrl" messages during the test (0: the test
# never connected to the target).
#
# Env (from tools/blktests): ROOT (checkout), OUT (build/blktests), BT (the built blktests
# copy), TESTS ("nvme/003 nvme/004 ..."), TARGETS ("rdmablk nvmet"), KCONFIG (the guest
# kernel's config file, for blktests' _have_kernel_option), RXE_ADDR, NVME_IMG_SIZE,
# PHASE_TIMEOUT (seconds for one target's whole ./check), TEST_STALL (900 s without output).
set -u
: "${ROOT:?}" "${OUT:?}" "${BT:?}" "${TESTS:?}" "${TARGETS:?}" "${RXE_ADDR:?}"
PHASE_TIMEOUT=${PHASE_TIMEOUT:-3000}
TRTYPE=${TRTYPE:-rdma}
if [ "$TRTYPE" = tcp ]; then
  # blktests' own default address for tcp (common/nvme def_traddr); the placeholder listener
  # of the target's file is a tcp one too
  TRADDR=127.0.0.1 KIND=tcp LISTENER_KIND='transport = "tcp"'
  ip link set lo up 2>/dev/null
else
  TRADDR=$RXE_ADDR KIND=verbs LISTENER_KIND='provider = "verbs"'
fi
TEST_STALL=${TEST_STALL:-900}
say() { echo "blktests-guest: $*"; }

# What blktests expects of a normal system that the VM's minimal /dev and /boot lack.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
for i in 0 1 2; do n=(stdin stdout stderr); [ -e "/dev/${n[i]}" ] || ln -s "/proc/self/fd/$i" "/dev/${n[i]}"; done
if [ -n "${KCONFIG:-}" ] && [ -f "$KCONFIG" ]; then
  mkdir -p /boot && cp "$KCONFIG" "/boot/config-$(uname -r)"
fi
modprobe loop 2>/dev/null

# Results, images and the target's config on ext4 over a virtio disk: blktests' TMPDIR lives
# in its output directory and both targets open the images with O_DIRECT (9p and tmpfs: no).
modprobe virtio_blk 2>/dev/null
for _ in $(seq 50); do [ -b /dev/vda ] && break; sleep 0.1; done
[ -b /dev/vda ] || { say "no /dev/vda (RXE_VM_DISK not attached)"; exit 2; }
mkfs.ext4 -q -F /dev/vda && mkdir -p /mnt/blk && mount /dev/vda /mnt/blk ||
  { say "cannot make the scratch file system"; exit 2; }
SCR=/mnt/blk

# rxe on eth0, as run-in-vm.sh made it: blktests' nvmet runs remove it (stop_soft_rdma).
ensure_rxe() {
  rdma link show 2>/dev/null | grep -q 'netdev eth0' && return 0
  modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0 || return 1
  for _ in $(seq 100); do
    grep -q ACTIVE /sys/class/infiniband/*/ports/1/state 2>/dev/null && return 0; sleep 0.1
  done
  return 1
}

TPID=
PLACEHOLDER=nqn.2026-11.io.rdmablk:blktests-placeholder
start_rdmablk() {
  local d=$SCR/rdmablk
  mkdir -p "$d/img"
  # The file must name a listener and a subsystem: a placeholder no test uses, on port 4419
  # (blktests-target-control adds 4420 at setup and removes it at cleanup, as blktests does
  # nvmet's port). 1 MiB MDTS as nvmet-rdma offers (nvme/029 passes 512 KiB through nvme-cli).
  cat > "$d/target.toml" <<CFG
[[listener]]
$LISTENER_KIND
address = "$TRADDR"
port = 4419

[target]
worker_threads = 2

[arena]
bytes = "1GiB"
lock = false

[limits]
max_io_size = 1048576

[[subsystem]]
nqn = "$PLACEHOLDER"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
backend = { kind = "null", size = "1MiB" }

[control]
socket = "$d/ctl.sock"
CFG
  RUST_LOG=${RUST_LOG:-info} "$ROOT/build/debug/rdmablk-target" --config "$d/target.toml" \
    >> "$OUT/rdmablk/target.log" 2>&1 &
  TPID=$!
  for _ in $(seq 100); do
    "$ROOT/build/debug/rdmablk-ctl" -s "$d/ctl.sock" status >/dev/null 2>&1 && return 0
    kill -0 "$TPID" 2>/dev/null || break; sleep 0.2
  done
  say "rdmablk-target did not start (see $OUT/rdmablk/target.log)"; return 1
}

# Subsystems a failed test left behind, so the next one starts clean.
sweep_rdmablk() {
  local n
  for n in $("$ROOT/build/debug/rdmablk-ctl" -s "$SCR/rdmablk/ctl.sock" status --json |
             python3 -c 'import json,sys
for s in json.load(sys.stdin)["result"]["subsystems"]: print(s["nqn"])'); do
    [ "$n" = "$PLACEHOLDER" ] && continue
    echo "left behind by the test: subsystem $n (removed)"
    RDMABLK_CTL_SOCKET=$SCR/rdmablk/ctl.sock "$ROOT/tools/blktests-target-control" cleanup \
      --subsysnqn "$n"
  done
}

# One ./check for all tests (each check start costs ~20 s under TCG); the kernel log is split
# per test afterwards at blktests' "run blktests nvme/NNN" markers. A test that prints
# nothing for $TEST_STALL seconds (e.g. one left waiting on a hung fio) is stopped with its
# ./check, marked in the output, and ./check goes on with the tests after it.
run_check() {
  local target=$1 remaining=$TESTS cpid last age rc=0
  local out=$OUT/$target/check.out
  : > "$out"
  while [ -n "$remaining" ]; do
    # shellcheck disable=SC2086
    setsid ./check -o "$SCR/results-$target" $remaining >> "$out" 2>&1 & cpid=$!
    local stalled=0 start; start=$(date +%s)
    while kill -0 "$cpid" 2>/dev/null; do
      sleep 10
      age=$(( $(date +%s) - $(stat -c %Y "$out") ))
      if [ "$age" -gt "$TEST_STALL" ]; then
        echo "    blktests-guest: no output for ${age} s: test stalled, ./check stopped" >> "$out"
        kill -KILL -- -"$cpid" 2>/dev/null; stalled=1; break
      elif [ $(( $(date +%s) - start )) -gt "$PHASE_TIMEOUT" ]; then
        echo "    blktests-guest: PHASE_TIMEOUT ($PHASE_TIMEOUT s) reached: ./check stopped" >> "$out"
        kill -KILL -- -"$cpid" 2>/dev/null; break
      fi
    done
    wait "$cpid"; rc=$?
    [ $stalled = 1 ] || break
    last=$(grep -oE '^nvme/[0-9]+' "$out" | tail -1)
    remaining=$(echo "$remaining" | tr ' ' '\n' | awk -v l="$last" 'f; $0 == l { f = 1 }' | tr '\n' ' ')
    remaining=${remaining% }
  done
  return $rc
}

cd "$BT" || exit 2
for target in $TARGETS; do
  mkdir -p "$OUT/$target" && : > "$OUT/$target.results"
  ( # each target in its own environment
    export nvme_trtype=$TRTYPE NVME_IMG_SIZE NVMET_BLKDEV_TYPES=${NVMET_BLKDEV_TYPES:-file}
    [ "$TRTYPE" = rdma ] && export USE_RXE=1
    if [ "$target" = rdmablk ]; then
      if [ "$TRTYPE" = rdma ]; then
        ensure_rxe || { say "no rxe device for rdmablk-target"; exit 2; }
      fi
      start_rdmablk || exit 2
      export NVME_TARGET_CONTROL=$ROOT/tools/blktests-target-control
      export RDMABLK_CTL_SOCKET=$SCR/rdmablk/ctl.sock BLKTESTS_IMG_DIR=$SCR/rdmablk/img
      export RDMABLK_BLKTESTS_TRADDR=$TRADDR RDMABLK_BLKTESTS_LOG=$OUT/rdmablk/control.log
      export RDMABLK_BLKTESTS_TRTYPE=$TRTYPE RDMABLK_BLKTESTS_PROVIDER=$KIND
    fi
    dmesg -C; dmesg -w > "$OUT/$target/dmesg.log" 2>&1 & DPID=$!
    t0=$(date +%s)
    run_check "$target"
    rc=$?
    t1=$(date +%s)
    sleep 1; kill "$DPID"
    say "$target: ./check exit status $rc after $((t1 - t0)) s"
    # per test: its lines of check's output and its connects ("new ctrl" in its dmesg part)
    for t in $TESTS; do
      n=${t#nvme/}
      awk -v t="$t" '$1 == t { p = 1; print; next } /^nvme\/[0-9]/ { p = 0 } p' \
        "$OUT/$target/check.out" > "$OUT/$target/$n.out"
      awk -v t="$t" '/run blktests / { for (i = 1; i < NF; i++) if ($i == "blktests") p = ($(i+1) == t) } p' "$OUT/$target/dmesg.log" \
        > "$OUT/$target/$n.dmesg"
      connects=$(grep -cE 'nvme[0-9]+: new ctrl' "$OUT/$target/$n.dmesg" || true)
      echo "$t $rc $((t1 - t0)) $connects" >> "$OUT/$target.results"
    done
    [ "$target" = rdmablk ] && { kill -0 "$TPID" 2>/dev/null || say "rdmablk-target died during the run"; }
    if [ -n "$TPID" ]; then kill -TERM "$TPID"; wait "$TPID"; echo "target exit status $?" >> "$OUT/rdmablk/target.log"; fi
    rm -rf "$OUT/$target/results"; cp -r "$SCR/results-$target" "$OUT/$target/results" 2>/dev/null
    exit 0
  )
done
cd /; umount /mnt/blk
exit 0
