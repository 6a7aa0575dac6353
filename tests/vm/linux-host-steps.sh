# shellcheck shell=bash
# linux-host-steps.sh - sourced by linux-host.sh once the Linux host is connected: the admin
# set nvme-cli uses, discard / write zeroes / flush, a real file system, `nvme reset` and a
# target restart under fio verify, `nvme connect-all`. Uses linux-host.sh's step, check, fail,
# ns_dev, start_target and its variables (BIN DEV DEV2 CTRL NQN NQN_KINDS IP PORT WORK TPID).

# kconnect NQN [OPTIONS]: connects NQN at $IP:$PORT through /dev/nvme-fabrics, as nvme-cli
# does underneath, with this host's NQN (and OPTIONS, comma-separated kernel options).
kconnect() {
  local hostnqn hostid
  hostnqn=$(cat /etc/nvme/hostnqn 2>/dev/null || true)
  # The host NQN and ID of the controller already connected to $1 (nvme-cli's): Linux 6.12
  # refuses a known host NQN with another host ID ("found same hostnqn ... but different
  # hostid"), and given none it would use its own.
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    hostnqn=$(cat "$c/hostnqn" 2>/dev/null || echo "$hostnqn")
    hostid=$(cat "$c/hostid" 2>/dev/null || true)
    break
  done
  printf 'transport=%s,traddr=%s,trsvcid=%s,nqn=%s%s%s%s' "$TRTYPE" "$IP" "$PORT" "$1" \
    "${hostnqn:+,hostnqn=$hostnqn}" "${hostid:+,hostid=$hostid}" "${2:+,$2}" >/dev/nvme-fabrics
}

# later STEP MESSAGE: a failure that does not stop the later steps (so one VM run shows every
# problem); the run still fails at the end.
LATER=()
later() { LATER+=("$*"); say "FAILED (continuing): $*"; }

# field NAME FILE: the value of "NAME : value" in nvme-cli's text output.
field() { sed -n "s/^$1 *: *//p" "$2" | head -n 1 | sed 's/ *$//'; }

# dev_written DEV: sectors written to DEV so far: its own stat and, with native multipath
# (DEV a head, nvmeXnY), its paths' (nvmeXcZnY, each under its controller), since a head may
# hand its bios to a path without counting them itself.
dev_written() {
  local b=${1#/dev/} f s=0
  for f in "/sys/block/$b/stat" /sys/class/nvme/nvme*/"${b%n*}"c*n"${b##*n}"/stat; do
    [ -r "$f" ] && s=$((s + $(awk '{ print $7 }' "$f")))
  done
  echo "$s"
}

# ctrl_state CTRL: the state of controller /dev/nvmeX in sysfs (live, resetting, connecting, ...).
ctrl_state() { cat "/sys/class/nvme/${1#/dev/}/state" 2>/dev/null || echo gone; }

# wait_gone NQN: until the host has no controller, block device or subsystem of NQN left (a
# hang guard of 10 s; `nvme disconnect` removes them before it returns).
wait_gone() {
  local f left
  for _ in $(seq 1 100); do
    left=
    for f in /sys/class/nvme/nvme*/subsysnqn /sys/block/nvme*/device/subsysnqn \
             /sys/class/nvme-subsystem/nvme-subsys*/subsysnqn; do
      [ "$(cat "$f" 2>/dev/null)" = "$1" ] && left="$left ${f#/sys/}"
    done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  fail "$STEP: 10 s after nvme disconnect the host still has$left"
}

# ---------------------------------------------------------------- the admin set
step admin
check nvme id-ctrl "$CTRL" >"$WORK/id-ctrl.txt"
[ "$(field subnqn "$WORK/id-ctrl.txt")" = "$NQN" ] || fail "admin: id-ctrl subnqn"
[ "$(field mn "$WORK/id-ctrl.txt")" = rdmablk ] || fail "admin: id-ctrl mn"
[ "$(field cntrltype "$WORK/id-ctrl.txt")" = 1 ] || fail "admin: id-ctrl cntrltype (I/O)"
# NN and MNAN: room for 1024 namespaces (nvmet's values); CMIC: multi-port, multi-controller,
# ANA reporting; the ANA log: the namespaces' group, optimized.
[ "$(field nn "$WORK/id-ctrl.txt")" = 1024 ] || fail "admin: id-ctrl nn"
[ "$(field mnan "$WORK/id-ctrl.txt")" = 1024 ] || fail "admin: id-ctrl mnan"
cmic=$(field cmic "$WORK/id-ctrl.txt")
[ $(( ${cmic:-0} & 0xb )) = $((0xb)) ] || fail "admin: id-ctrl cmic $cmic (want 0xb: ANA, multi-ctrl, multi-port)"
check nvme ana-log "$CTRL" >"$WORK/ana-log.txt"
grep -qiE 'state[[:space:]]*:[[:space:]]*optimized' "$WORK/ana-log.txt" ||
  { cat "$WORK/ana-log.txt"; fail "admin: ana-log has no optimized group"; }
check nvme id-ns "$DEV" >"$WORK/id-ns.txt"
want=$(( $(cat "/sys/block/$(basename "$DEV")/size") * 512 / 4096 ))
nsze=$(field nsze "$WORK/id-ns.txt"); dlfeat=$(field dlfeat "$WORK/id-ns.txt")
[ "$(printf '%d' "${nsze:-0}")" = "$want" ] || fail "admin: id-ns nsze $nsze != $want"
[ "$(printf '%d' "${dlfeat:-0}")" = 1 ] || fail "admin: id-ns dlfeat $dlfeat (RAM reads zeroes)"
check nvme list-ns "$CTRL" >"$WORK/list-ns.txt"
grep -qE '^\[ *0\]:0x1$' "$WORK/list-ns.txt" && grep -qE '^\[ *1\]:0x2$' "$WORK/list-ns.txt" ||
  { cat "$WORK/list-ns.txt"; fail "admin: list-ns is not 1, 2"; }
check nvme ns-descs "$DEV" >"$WORK/ns-descs.txt"
grep -qi uuid "$WORK/ns-descs.txt" || fail "admin: ns-descs has no UUID"
check nvme error-log "$CTRL" -e 4 >/dev/null
check nvme smart-log "$CTRL" >"$WORK/smart.txt"
grep -qi "temperature" "$WORK/smart.txt" || fail "admin: smart-log"
check nvme fw-log "$CTRL" >"$WORK/fw.txt"
grep -q "frs1" "$WORK/fw.txt" || fail "admin: fw-log has no slot 1 revision"
check nvme get-log "$CTRL" --log-id=4 --log-len=4096 >/dev/null
# Commands Supported and Effects, raw: the NVM command set's Write (opcode 1, IOCS at byte
# 1024 + 4) is supported and changes LBA content (CSUPP | LBCC = 3).
check nvme get-log "$CTRL" --log-id=5 --log-len=4096 -b >"$WORK/effects.bin"
[ "$(od -An -tu4 -j 1028 -N 4 "$WORK/effects.bin" | tr -d ' ')" = 3 ] ||
  fail "admin: effects log: Write is not CSUPP|LBCC"
# Features: number of queues (what connect negotiated), keep-alive timer (the host's KATO),
# async event config, volatile write cache.
check nvme get-feature "$CTRL" -f 7 >"$WORK/f7.txt"
grep -q "Current value" "$WORK/f7.txt" || fail "admin: get-feature 7"
check nvme get-feature "$CTRL" -f 0xf >"$WORK/f15.txt"
grep -qE "0x0*(1388|2710)" "$WORK/f15.txt" || { cat "$WORK/f15.txt"; fail "admin: keep-alive timer"; }
check nvme get-feature "$CTRL" -f 0xb >/dev/null
check nvme get-feature "$CTRL" -f 6 >/dev/null
check nvme set-feature "$CTRL" -f 0xb -v 0x100 >/dev/null
nvme get-feature "$CTRL" -f 0xb | grep -q "0x0*100" || fail "admin: async event config not kept"
# The registers, one property at a time, checked: CAP (MQES = max_queue_depth - 1, CSS NVM),
# VS 1.3, CC.EN, CSTS.RDY. (nvme-cli 2.3's show-regs walks every offset up to CMBSZ and gives
# up on this fabrics controller after its first answer; its output is shown, not judged.)
check nvme get-property "$CTRL" --offset=0 --human-readable >"$WORK/cap.txt"
grep -q "(MQES): 128" "$WORK/cap.txt" && grep -q "NVM command set is Supported" "$WORK/cap.txt" ||
  { cat "$WORK/cap.txt"; later "admin: CAP"; }
nvme get-property "$CTRL" --offset=8 | grep -q "10300" || later "admin: VS is not 1.3"
nvme get-property "$CTRL" --offset=0x14 --human-readable | grep -q "(EN): Yes" || later "admin: CC.EN"
nvme get-property "$CTRL" --offset=0x1c --human-readable | grep -q "(RDY): Yes" || later "admin: CSTS.RDY"
nvme show-regs "$CTRL" 2>&1 | head -n 3 | sed 's/^/  show-regs (not judged): /'
nvme list -v >"$WORK/list.txt" 2>&1 || fail "admin: nvme list -v"
grep -q "$NQN" "$WORK/list.txt" || fail "admin: nvme list -v does not show $NQN"

# ---------------------------------------------------------------- every size, 512-byte blocks
step sizes-512
# The file namespace has 512-byte blocks: every size from one block up to MDTS (128 KiB).
(cd "$WORK" && fio --name=sizes --filename="$DEV2" --direct=1 --ioengine=libaio --iodepth=8 \
  --bsrange=512-128k --rw=randwrite --size=16m --randrepeat=1 --randseed=5 --verify=crc32c \
  --do_verify=1 --verify_fatal=1 --output="$WORK/sizes.txt") ||
  { cat "$WORK/sizes.txt"; fail "$STEP: fio 512 B .. 128 KiB"; }

# ---------------------------------------------------------------- every size, each exactly once
step every-size
# fio's --bsrange draws sizes at random; this writes and reads back each size from one block
# to MDTS (limits.max_io_size = 128 KiB) exactly once, one command each, on both namespaces.
python3 "$ROOT/tests/vm/every_size.py" "$DEV2" 512 131072 || fail "$STEP: 512-byte blocks"
python3 "$ROOT/tests/vm/every_size.py" "$DEV" 4096 131072 || fail "$STEP: 4 KiB blocks"

# ---------------------------------------------------------------- discard, zeroes, flush
step discard
MIB=1048576
readback() { dd if="$1" bs=$MIB skip="$2" count=1 iflag=direct status=none | od -An -v -tx1 | sort -u; }
check dd if=/dev/urandom of="$WORK/pattern" bs=$MIB count=4 status=none
check dd if="$WORK/pattern" of="$DEV" bs=$MIB count=4 oflag=direct status=none
# zero_mib DEV MIB: whether that MiB of DEV reads as zeroes.
zero_mib() { [ "$(readback "$1" "$2" | tr -d ' \n')" = "$(printf '00%.0s' $(seq 16))" ]; }
zero_mib "$DEV" 1 && fail "discard: the pattern did not reach the device"
check blkdiscard -o 0 -l $MIB "$DEV"
zero_mib "$DEV" 0 || fail "discard: deallocated blocks do not read as zeroes"
if zero_mib "$DEV" 1; then
  for k in 0 1 2 3 4 5 6 7; do
    printf '  256K chunk %d: ' "$k"
    dd if="$DEV" bs=256k skip=$k count=1 iflag=direct status=none | od -An -tx1 | sort -u | wc -l
  done
  later "discard: blocks after the range read as zeroes"
fi
check blkdiscard "$DEV2"            # the whole 512-byte-block file namespace, like mkfs does
step write-zeroes
check blkdiscard -z -o $((2 * MIB)) -l $MIB "$DEV"
[ "$(readback "$DEV" 2 | tr -d ' \n')" = "$(printf '00%.0s' $(seq 16))" ] ||
  fail "write-zeroes: blocks do not read as zeroes"
step flush
# Through the namespaces' block devices (the controller's character device refuses I/O
# commands when it has more than one namespace).
check nvme flush "$DEV"
check nvme flush "$DEV2"
check sync

# ---------------------------------------------------------------- a real file system
step filesystem
MNT=$WORK/mnt; mkdir -p "$MNT"
modprobe ext4 2>/dev/null || true
check mkfs.ext4 -q -F -E discard "$DEV"
check mount "$DEV" "$MNT"
for i in 1 2 3 4; do check dd if=/dev/urandom of="$MNT/f$i" bs=1M count=$((i * 2)) status=none; done
check mkdir "$MNT/dir"; check cp "$WORK/pattern" "$MNT/dir/pattern"
(cd "$MNT" && sha256sum f1 f2 f3 f4 dir/pattern) >"$WORK/sums"
check rm "$MNT/f2"
check fstrim -v "$MNT"
sed -i '/ f2$/d' "$WORK/sums"
check umount "$MNT"
fsck.ext4 -f -n "$DEV" >"$WORK/fsck.txt" 2>&1 || { cat "$WORK/fsck.txt"; fail "filesystem: fsck -f"; }
check mount "$DEV" "$MNT"
(cd "$MNT" && sha256sum -c --quiet "$WORK/sums") || fail "filesystem: checksums after remount"
check umount "$MNT"

# ---------------------------------------------------------------- resets under fio
# fio_bg NAME DEVICE: fio write+verify in the background (pid in FIO_PID), long enough to be
# in flight across what the step does to the controller. fio ignores SIGPIPE: Linux 6.1's
# nvme-tcp host may send a request's PDU from the submitting process itself (when its queue is
# idle), and a send into the connection the restarted target closed ("nvme0: failed to send
# request -32" in dmesg) then signals SIGPIPE to that process: fio died of it once in a CI run
# (2026-12-07, target-restart over tcp; "fio: pid=N, got signal=13"), while the host requeued
# the request and completed it after its reconnect. The host's behaviour, not the target's: a
# process writing to an nvme-tcp namespace of a target that restarts can get SIGPIPE.
fio_bg() {
  FIO_DEV=$2 FIO_BASE=$(dev_written "$2")
  (trap '' PIPE; cd "$WORK" && exec fio --name="$1" --filename="$2" --direct=1 --ioengine=libaio --iodepth=16 \
    --bsrange=4k-64k --rw=randwrite --size=24m --randrepeat=1 --randseed=7 --verify=crc32c \
    --verify_fatal=1 --do_verify=1 --loops=3 --output="$WORK/$1.txt") &
  FIO_PID=$!
}
# fio_going NAME: waits until the background fio has written 4 MiB to its device (a hang
# guard of 60 s), so that what the step does next happens under its I/O; fails if it ended.
fio_going() {
  for _ in $(seq 1 600); do
    kill -0 "$FIO_PID" 2>/dev/null ||
      { cat "$WORK/$1.txt"; fail "$STEP: fio ended before the step acted (raise its --size)"; }
    [ $(( $(dev_written "$FIO_DEV") - FIO_BASE )) -ge 8192 ] && return 0
    sleep 0.1
  done
  fail "$STEP: fio wrote less than 4 MiB to $FIO_DEV in 60 s"
}
fio_wait() {
  wait "$FIO_PID" || { cat "$WORK/$1.txt"; fail "$STEP: fio saw an error"; }
  grep -E "err= *0" -q "$WORK/$1.txt" || { cat "$WORK/$1.txt"; fail "$STEP: fio err != 0"; }
}

step reset
fio_bg reset "$DEV"
fio_going reset
check nvme reset "$CTRL"
fio_wait reset

step target-restart
fio_bg restart "$DEV2"
fio_going restart
say "SIGTERM the target under fio, then start it again"
kill -TERM "$TPID"; wait "$TPID"; RC=$?
[ "$RC" = 0 ] || fail "target-restart: the target exited with $RC"
TPID=
# Start it again once the host has seen it go (its controller is no longer live).
for _ in $(seq 1 300); do [ "$(ctrl_state "$CTRL")" != live ] && break; sleep 0.1; done
[ "$(ctrl_state "$CTRL")" != live ] || fail "$STEP: $CTRL still live 30 s after the target exited"
say "the host noticed: $CTRL is $(ctrl_state "$CTRL")"
start_target
fio_wait restart
[ -b "$DEV2" ] || fail "target-restart: $DEV2 is gone"

# ---------------------------------------------------------------- connect-all
step connect-all
check nvme disconnect -n "$NQN"
CONNECTED=0
wait_gone "$NQN"
check nvme_connect_all -s "$PORT"
CONNECTED=1
# Every subsystem this host may use, and only those.
ctrl_of "$NQN_KINDS" >/dev/null || fail "$STEP: connect-all did not connect $NQN_KINDS"
ctrl_of nqn.2026-11.io.rdmablk:vm-hidden >/dev/null && fail "$STEP: connected a hidden subsystem"
check nvme disconnect -n "$NQN_KINDS"
DEV=$(ns_dev 1) || fail "connect-all: no block device for ns 1"
CTRL=$(ctrl_of "$NQN")
check dd if="$DEV" of=/dev/null bs=$MIB count=8 iflag=direct status=none

# ---------------------------------------------------------------- a namespace added live
step live-namespace
# rdmablk-ctl adds namespace 3 while fio verifies on namespace 1: the host sees /dev/nvmeXn3
# appear (Namespace Attribute Changed event, Changed Namespace List), uses it, and sees it go.
CTL=${RDMABLK_CTL:-$(dirname "$BIN")/rdmablk-ctl}
[ -x "$CTL" ] || fail "$STEP: no rdmablk-ctl at $CTL"
fio_bg live "$DEV"
check "$CTL" namespace add "$NQN" 3 --backend ram --size 32MiB
DEV3=$(ns_dev 3) || fail "$STEP: namespace 3 did not appear on the host"
check dd if=/dev/urandom of="$WORK/ns3.bin" bs=1M count=4 status=none
check dd if="$WORK/ns3.bin" of="$DEV3" bs=1M oflag=direct status=none
check dd if="$DEV3" of="$WORK/ns3.back" bs=1M count=4 iflag=direct status=none
cmp "$WORK/ns3.back" "$WORK/ns3.bin" || fail "$STEP: namespace 3 reads back other data"
check "$CTL" namespace remove "$NQN" 3
gone=0
for _ in $(seq 1 100); do [ -b "$DEV3" ] || { gone=1; break; }; sleep 0.1; done
[ "$gone" = 1 ] || fail "$STEP: $DEV3 is still there after the namespace was removed"
fio_wait live
grep -q "nsid = 3" "$WORK/target.toml" && fail "$STEP: the configuration file still has ns 3"

# ---------------------------------------------------------------- the host's lifecycle
step disconnect-between-passes
(cd "$WORK" && fio --name=passes --filename="$DEV" --direct=1 --ioengine=libaio --iodepth=8 \
  --bsrange=4k-128k --rw=randwrite --size=16m --randrepeat=1 --randseed=11 --verify=crc32c \
  --do_verify=0 --output="$WORK/passes1.txt") || fail "$STEP: fio write pass"
check nvme disconnect -n "$NQN"
CONNECTED=0
check nvme_connect -s "$PORT" -n "$NQN"
CONNECTED=1
DEV=$(ns_dev 1) || fail "$STEP: no block device after reconnecting"
(cd "$WORK" && fio --name=passes --filename="$DEV" --direct=1 --ioengine=libaio --iodepth=8 \
  --bsrange=4k-128k --rw=randwrite --size=16m --randrepeat=1 --randseed=11 --verify=crc32c \
  --verify_only=1 --verify_fatal=1 --output="$WORK/passes2.txt") ||
  { cat "$WORK/passes2.txt"; fail "$STEP: the verify pass after reconnecting"; }

step not-allowed
# Refused with Connect Invalid Host, which the Linux host logs as "Connect for subsystem NQN
# is not allowed, hostnqn: ..." (drivers/nvme/host/fabrics.c): looked for in the kernel log
# after a marker written just before the attempt.
echo "linux-host: step not-allowed" > /dev/kmsg
if nvme_connect -s "$PORT" -n nqn.2026-11.io.rdmablk:vm-hidden \
    >"$WORK/refused.txt" 2>&1; then
  fail "$STEP: a host not on the allow-list connected"
fi
refused=0
for _ in $(seq 1 50); do
  dmesg | awk '/linux-host: step not-allowed/ { p = 1; next } p' >"$WORK/refused-dmesg.txt"
  grep -qF "Connect for subsystem nqn.2026-11.io.rdmablk:vm-hidden is not allowed" \
    "$WORK/refused-dmesg.txt" && { refused=1; break; }
  sleep 0.1
done
if [ "$refused" != 1 ]; then
  sed 's/^/  nvme connect: /' "$WORK/refused.txt"; sed 's/^/  dmesg: /' "$WORK/refused-dmesg.txt"
  fail "$STEP: refused, but not with Connect Invalid Host (no \"is not allowed\" in the kernel log)"
fi

step queue-options
check nvme disconnect -n "$NQN"
CONNECTED=0
# 8 I/O queues asked (the host caps them at its CPUs), 1024 entries asked (the 6.1 host clamps
# to 128), keep-alive 15 s, then a second controller of the same host (--duplicate-connect).
check nvme_connect -s "$PORT" -n "$NQN" --nr-io-queues=8 --queue-size=1024 \
  --keep-alive-tmo=15
CONNECTED=1
DEV=$(ns_dev 1) || fail "$STEP: no block device"
CTRL=$(ctrl_of "$NQN")
check nvme get-feature "$CTRL" -f 0xf >"$WORK/kato.txt"
grep -qE "0x0*3a98" "$WORK/kato.txt" || { cat "$WORK/kato.txt"; fail "$STEP: KATO is not 15 s"; }
check dd if="$DEV" of=/dev/null bs=128k count=64 iflag=direct status=none
# nvme-cli 2.3 (libnvme 1.3) answers "already connected" despite --duplicate-connect when an
# existing controller matches, so the second controller is asked of the kernel directly, the
# way nvme-cli itself does it (/dev/nvme-fabrics).
kconnect "$NQN" duplicate_connect,queue_size=128 ||
  fail "$STEP: duplicate_connect through /dev/nvme-fabrics"
# Both controllers in ONE nvme subsystem, namespaces 1 and 2 each one head over both.
one_head "$NQN" 2 2
check nvme disconnect -n "$NQN"       # both controllers
check nvme_connect -s "$PORT" -n "$NQN"
DEV=$(ns_dev 1) || fail "$STEP: no block device"

if [ "$TRTYPE" = tcp ]; then
  # NVMe/TCP header and data digests (CRC32C) on every queue, under fio verify.
  step digests
  check nvme disconnect -n "$NQN"
  check nvme_connect -s "$PORT" -n "$NQN" --hdr-digest --data-digest
  DEV=$(ns_dev 1) || fail "$STEP: no block device"
  (cd "$WORK" && fio --name=digests --filename="$DEV" --direct=1 --ioengine=libaio \
    --iodepth=16 --bsrange=4k-128k --rw=randwrite --size=16m --verify=crc32c --do_verify=1 \
    --verify_fatal=1 --output="$WORK/digests.txt") ||
    { cat "$WORK/digests.txt"; fail "$STEP: fio verify with digests"; }
  n=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/target.log" | grep 'queue connected (NVMe/TCP)' |
    grep -c 'hdgst=true ddgst=true')
  [ "$n" -ge 2 ] || fail "$STEP: the target saw $n queues with both digests, want the admin and I/O queues"
  say "fio verify with header and data digests: $n queues with both"
  check nvme disconnect -n "$NQN"
  check nvme_connect -s "$PORT" -n "$NQN"
  DEV=$(ns_dev 1) || fail "$STEP: no block device"
fi

step backends
check nvme_connect -s "$PORT" -n "$NQN_KINDS"
BLK=""; NUL=""
for _ in $(seq 1 100); do
  for b in /sys/block/nvme*n*; do
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN_KINDS" ] || continue
    case $(cat "$b/nsid") in 1) BLK=/dev/$(basename "$b") ;; 2) NUL=/dev/$(basename "$b") ;; esac
  done
  [ -n "$BLK" ] && [ -n "$NUL" ] && break
  sleep 0.1
done
[ -n "$BLK" ] && [ -n "$NUL" ] || fail "$STEP: no block devices for $NQN_KINDS"
(cd "$WORK" && fio --name=blk --filename="$BLK" --direct=1 --ioengine=libaio --iodepth=16 \
  --bsrange=4k-128k --rw=randwrite --size=16m --verify=crc32c --do_verify=1 \
  --verify_fatal=1 --output="$WORK/blk.txt") || { cat "$WORK/blk.txt"; fail "$STEP: block backend"; }
check dd if=/dev/zero of="$NUL" bs=128k count=32 oflag=direct status=none
check dd if="$NUL" of=/dev/null bs=128k count=32 iflag=direct status=none
check nvme disconnect -n "$NQN_KINDS"

[ ${#LATER[@]} = 0 ] || fail "$(printf '%s; ' "${LATER[@]}")"
