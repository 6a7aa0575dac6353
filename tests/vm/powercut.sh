#!/usr/bin/env bash
# powercut.sh - one boot of a power-cut trial, INSIDE the rxe VM (tools/powercut starts it and
# SIGKILLs qemu while the writer runs; see docs/reliability.md).
#
# Disks (qemu cache=none, so whatever the guest wrote is on the host file at once, and the
# kill loses only the guest's memory: its page cache and anything the target held back):
#   /dev/vda  raw: the block backend's namespace (kind = "block", O_DIRECT)
#   /dev/vdb  ext4 with direct.img (kind = "file", direct = true) and buffered.img
#             (direct = false: the page cache between the target and the disk)
#   an emulated NVMe drive (RXE_VM_NVME): the nvme backend's namespace (kind = "nvme",
#             /dev/ng0n1, polled completions), checked through /dev/nvme0n1
# This boot first checks what the previous trial's journal says must have survived
# (PREV_MODE), on the storage as this fresh kernel finds it (ext4 replays its journal at
# mount), then starts rdmablk-target on MODE and rdmablk-powercut writes to it over rxe until
# the VM dies. With MODE=none it only checks.
#
# Env: ROOT, OUT (the run directory, on the host's share: journals, checks, logs), TRIAL,
# MODE (block|file-direct|file-buffered|nvme|none), PREV_MODE (the same, or none), RXE_ADDR,
# SEED, BLOCKS (1024), BIN (build/debug: rdmablk-target, rdmablk-powercut).
set -u
: "${ROOT:?}" "${OUT:?}" "${TRIAL:?}" "${MODE:?}" "${PREV_MODE:?}" "${RXE_ADDR:?}"
BLOCKS=${BLOCKS:-1024}
BIN=${BIN:-$ROOT/build/debug}
NQN=nqn.2026-11.io.rdmablk:powercut
say() { echo "powercut-guest[$TRIAL]: $*"; }
fail() { say "error: $*"; echo "$TRIAL error $*" >> "$OUT/checks"; exit 2; }

modprobe virtio_blk 2>/dev/null
for _ in $(seq 50); do [ -b /dev/vdb ] && break; sleep 0.1; done
[ -b /dev/vda ] && [ -b /dev/vdb ] || fail "no /dev/vda and /dev/vdb (RXE_VM_DISK)"
# The NVMe drive, polled (the nvme backend's own path): /dev/nvme0n1 and /dev/ng0n1.
modprobe nvme poll_queues=1 2>/dev/null
for _ in $(seq 50); do [ -c /dev/ng0n1 ] && [ -b /dev/nvme0n1 ] && break; sleep 0.1; done
[ -c /dev/ng0n1 ] && [ -b /dev/nvme0n1 ] || fail "no /dev/ng0n1 and /dev/nvme0n1 (RXE_VM_NVME)"
mkdir -p /mnt/pc
path_of() {
  case $1 in
    block) echo /dev/vda ;;
    nvme) echo /dev/nvme0n1 ;;
    file-direct) echo /mnt/pc/direct.img ;;
    file-buffered) echo /mnt/pc/buffered.img ;;
  esac
}

if [ "$TRIAL" = 0 ]; then
  # A fresh start: every block of the region zero (generation 0: never written).
  for d in /dev/vda /dev/nvme0n1; do
    dd if=/dev/zero of=$d bs=1M count=$((BLOCKS * 4096 >> 20)) oflag=direct status=none ||
      fail "cannot zero $d"
  done
  # 4 KiB file-system blocks, as the namespace's: a small disk would get 1 KiB ones, and a
  # namespace block over four of them may tear where the target promises it will not.
  mkfs.ext4 -q -F -b 4096 /dev/vdb && mount /dev/vdb /mnt/pc || fail "cannot make ext4 on /dev/vdb"
  for f in direct buffered; do
    dd if=/dev/zero of=/mnt/pc/$f.img bs=1M count=$((BLOCKS * 4096 >> 20)) conv=fsync status=none ||
      fail "cannot create /mnt/pc/$f.img"
  done
  sync
else
  mount /dev/vdb /mnt/pc || fail "cannot mount /dev/vdb after the cut"
fi

if [ "$PREV_MODE" != none ]; then
  prev=$((TRIAL - 1))
  out=$("$BIN/rdmablk-powercut" check "$(path_of "$PREV_MODE")" \
    --journal "$OUT/trial-$prev.journal" 2>&1)
  rc=$?
  echo "$out" > "$OUT/check-$prev.log"
  echo "$prev $PREV_MODE rc=$rc $(head -1 <<<"$out")" >> "$OUT/checks"
  say "check of trial $prev ($PREV_MODE): rc=$rc: $(head -1 <<<"$out")"
fi
[ "$MODE" = none ] && exit 0

case $MODE in
  block) backend='{ kind = "block", path = "/dev/vda" }' ;;
  file-direct) backend='{ kind = "file", path = "/mnt/pc/direct.img", direct = true }' ;;
  file-buffered) backend='{ kind = "file", path = "/mnt/pc/buffered.img", direct = false }' ;;
  nvme) backend='{ kind = "nvme", path = "/dev/ng0n1", completions = "poll" }' ;;
  *) fail "MODE=$MODE: block, file-direct, file-buffered, nvme or none" ;;
esac
d=/tmp/powercut && mkdir -p $d
cat > $d/target.toml <<CFG
[[listener]]
provider = "verbs"
address = "$RXE_ADDR"
port = 4420

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
backend = $backend
CFG
RUST_LOG=warn "$BIN/rdmablk-target" --config $d/target.toml \
  > $d/target.out 2> "$OUT/target-$TRIAL.log" &
for _ in $(seq 300); do grep -q '^ready$' $d/target.out 2>/dev/null && break; sleep 0.1; done
grep -q '^ready$' $d/target.out || fail "rdmablk-target did not print ready within 30 s ($OUT/target-$TRIAL.log)"
say "writing to $MODE ($(path_of "$MODE")) until the power is cut"
"$BIN/rdmablk-powercut" write "rdma://$RXE_ADDR:4420/$NQN" \
  --journal "$OUT/trial-$TRIAL.journal" --trial "$TRIAL" --blocks "$BLOCKS" --seed "${SEED:-1}" \
  2> "$OUT/writer-$TRIAL.log"
fail "the writer stopped before the cut: $(tail -1 "$OUT/writer-$TRIAL.log")"
