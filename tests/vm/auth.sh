#!/usr/bin/env bash
# auth.sh - run INSIDE the rxe VM on a kernel with NVMe in-band authentication (Debian's 6.12:
# NVME_AUTH, NVME_TARGET_AUTH), from the repository root:
#
#   RXE_VM_KPKG=linux-image-6.12.95+deb12-amd64 tools/rxe-vm/run-in-vm.sh bash tests/vm/auth.sh
#
# DH-HMAC-CHAP interop both ways, keys from nvme gen-dhchap-key:
#   A. the Linux host (nvme connect --dhchap-secret [--dhchap-ctrl-secret]) against
#      rdmablk-target: bidirectional with ffdhe2048/SHA-384 and key files, unidirectional with
#      the null group and an inline key (each: connect, verified I/O, disconnect); a
#      re-authentication the host asks for (sysfs dhchap_secret) with I/O after it; wrong host
#      key, no key and wrong controller key refused;
#   B. rdmablk-initiator (the verify example) against nvmet with configfs dhchap_key,
#      dhchap_ctrl_key, dhchap_hash, dhchap_dhgroup: right keys pass verified I/O, a wrong
#      key and no key are refused.
# Each check prints "auth: ok|FAIL <name>"; the last line is "RESULT: PASS|FAIL (...)".
# Over NVMe/TCP with TRTYPE=tcp: rdmablk-target's tcp listener, nvmet-tcp, tcp:// URLs.
#
# Env: TRTYPE (rdma, the default, or tcp), RDMABLK_TARGET (default
#      build/debug/rdmablk-target), VERIFY_BIN (default build/debug/examples/verify),
#      RXE_VM_IP (10.0.2.15).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TBIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
VBIN=${VERIFY_BIN:-$ROOT/build/debug/examples/verify}
IP=${RXE_VM_IP:-10.0.2.15}
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh"  # TRTYPE, nvme_connect
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # small_target_toml
TPORT=4420
NPORT=4421
NQN=nqn.2026-11.io.rdmablk:vm-auth
NVMET_NQN=nqn.2026-11.io.rdmablk:vm-auth-nvmet
HOST1=nqn.2014-08.org.nvmexpress:uuid:6a0f5f2c-1f7e-4a1b-9a53-000000000001
HOST2=nqn.2014-08.org.nvmexpress:uuid:6a0f5f2c-1f7e-4a1b-9a53-000000000002
HOSTID1=6a0f5f2c-1f7e-4a1b-9a53-000000000001
HOSTID2=6a0f5f2c-1f7e-4a1b-9a53-000000000002
WORK=$(mktemp -d /tmp/rdmablk-auth.XXXXXX)
CFG=/sys/kernel/config/nvmet
TPID=
FAILED=()

say() { echo "auth: $*"; }
nvmet_cleanup() {
  [ -d "$CFG" ] || return 0
  rm -f "$CFG/ports/2/subsystems/$NVMET_NQN" 2>/dev/null
  rmdir "$CFG/ports/2" 2>/dev/null
  rm -f "$CFG/subsystems/$NVMET_NQN/allowed_hosts/$HOST1" 2>/dev/null
  echo 0 >"$CFG/subsystems/$NVMET_NQN/namespaces/1/enable" 2>/dev/null
  rmdir "$CFG/subsystems/$NVMET_NQN/namespaces/1" "$CFG/subsystems/$NVMET_NQN" 2>/dev/null
  rmdir "$CFG/hosts/$HOST1" 2>/dev/null
}
ok() { say "ok $1"; }
bad() { say "FAIL $1${2:+: $2}"; FAILED+=("$1"); }
finish() {
  [ -n "$TPID" ] && kill -TERM "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  nvmet_cleanup
  if [ ${#FAILED[@]} -eq 0 ]; then
    echo "RESULT: PASS (DH-HMAC-CHAP over $TRTYPE: Linux host <-> rdmablk-target bidirectional ffdhe2048/sha384, unidirectional null, re-auth, wrong/no/wrong-ctrl key refused; rdmablk-initiator <-> nvmet right key I/O, wrong/no key refused)"
    exit 0
  fi
  echo "----- target log (last 40 lines) -----"; tail -n 40 "$WORK/target.log" 2>/dev/null
  echo "----- dmesg (last 40 lines) -----"; dmesg | tail -n 40
  echo "RESULT: FAIL (over $TRTYPE: ${FAILED[*]})"
  exit 1
}
die() { bad setup "$*"; finish; }

[ -x "$TBIN" ] || die "no target binary at $TBIN (cargo build -p rdmablk-target)"
[ -x "$VBIN" ] || die "no verify binary at $VBIN (cargo build -p rdmablk-initiator --example verify)"
command -v nvme >/dev/null || die "nvme-cli is missing"
modprobe "nvme-$TRTYPE" || die "modprobe nvme-$TRTYPE"
[ -e /sys/module/nvme_auth ] || modprobe nvme-auth 2>/dev/null || true
[ -e /sys/module/nvme_auth ] || die "kernel $(uname -r) has no NVMe in-band authentication (use RXE_VM_KPKG=linux-image-6.12.95+deb12-amd64)"

# Keys as an administrator makes them. gen-dhchap-key -m N -n NQN stores the secret already
# transformed once; both ends transform again, so any of these forms must interoperate.
K1=$(nvme gen-dhchap-key -m 1 -n "$HOST1") || die "gen-dhchap-key"
C1=$(nvme gen-dhchap-key -m 2 -l 48) || die "gen-dhchap-key"
K2=$(nvme gen-dhchap-key -m 0 -l 32) || die "gen-dhchap-key"
KX=$(nvme gen-dhchap-key -m 1 -n "$HOST1") || die "gen-dhchap-key"
umask 077
echo "$K1" >"$WORK/host1.key"
echo "$C1" >"$WORK/ctrl1.key"
echo "$KX" >"$WORK/wrong.key"

# ------------------------------------------------------------------ A: rdmablk-target
if [ "$TRTYPE" = rdma ]; then LISTENER='provider = "verbs"'; else LISTENER="transport = \"$TRTYPE\""; fi
{ cat <<CFG
[[listener]]
$LISTENER
address = "$IP"
port = $TPORT

CFG
small_target_toml
cat <<CFG

[[subsystem]]
nqn = "$NQN"
hosts = [
  { nqn = "$HOST1", dhchap_key_file = "$WORK/host1.key", dhchap_ctrl_key_file = "$WORK/ctrl1.key", dhchap_hash = "sha384", dhchap_dhgroup = "ffdhe2048" },
  { nqn = "$HOST2", dhchap_key = "$K2" },
]

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = { kind = "ram", size = "32MiB" }
CFG
} >"$WORK/target.toml"

RUST_LOG=${RUST_LOG:-info} "$TBIN" --config "$WORK/target.toml" >"$WORK/target.out" 2>"$WORK/target.log" &
TPID=$!
for _ in $(seq 1 300); do
  grep -q '^ready$' "$WORK/target.out" 2>/dev/null && break
  kill -0 "$TPID" 2>/dev/null || die "target exited at start: $(tail -3 "$WORK/target.log")"
  sleep 0.1
done
grep -q '^ready$' "$WORK/target.out" || die "target did not print ready within 30 s"
grep -q "readable by group or others" "$WORK/target.log" && bad no-permission-warning \
  "warned about 0600 files"

ns_dev() {
  local b
  for _ in $(seq 1 100); do
    for b in /sys/block/nvme*n*; do
      [ -e "$b" ] || continue
      [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && { echo "/dev/$(basename "$b")"; return 0; }
    done
    sleep 0.1
  done
  return 1
}

# io_check DEV: writes 1 MiB of random data at a 1 MiB offset with O_DIRECT and reads it back.
io_check() {
  head -c 1048576 /dev/urandom >"$WORK/pattern"
  dd if="$WORK/pattern" of="$1" bs=64k seek=16 oflag=direct conv=fsync status=none || return 1
  dd if="$1" of="$WORK/back" bs=64k skip=16 count=16 iflag=direct status=none || return 1
  cmp -s "$WORK/pattern" "$WORK/back"
}

connect() { # connect HOSTNQN HOSTID ARGS...
  local h=$1 id=$2; shift 2
  timeout 90 nvme connect -t "$TRTYPE" -a "$IP" -s "$TPORT" -n "$NQN" --hostnqn="$h" --hostid="$id" \
    -i 1 "$@" >"$WORK/connect.out" 2>&1
}

disconnect() { nvme disconnect -n "$NQN" >/dev/null 2>&1; sleep 0.5; }

# A1: bidirectional, ffdhe2048, SHA-384; then a host-initiated re-authentication.
if connect "$HOST1" "$HOSTID1" --dhchap-secret="$K1" --dhchap-ctrl-secret="$C1"; then
  DEV=$(ns_dev) && io_check "$DEV" && ok linux-bidi-ffdhe2048 || bad linux-bidi-ffdhe2048 "I/O"
  CTRL=
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] && CTRL=$(basename "$c") && break
  done
  before=$(dmesg | grep -c "qid 0: authenticated")
  if [ -w "/sys/class/nvme/$CTRL/dhchap_secret" ]; then
    echo "$K1" >"/sys/class/nvme/$CTRL/dhchap_secret"
    # The host re-authenticates in the background: wait for its new "qid 0: authenticated"
    # (up to 30 s, as a loaded machine under TCG may need), not a fixed time.
    for _ in $(seq 1 300); do
      after=$(dmesg | grep -c "qid 0: authenticated")
      [ "$after" -gt "$before" ] && break
      sleep 0.1
    done
    if [ "$after" -gt "$before" ] && io_check "$DEV"; then ok linux-reauth
    else bad linux-reauth "no new 'qid 0: authenticated' within 30 s, or I/O failed after it"; fi
  else
    bad linux-reauth "no /sys/class/nvme/$CTRL/dhchap_secret"
  fi
  disconnect
else
  bad linux-bidi-ffdhe2048 "connect: $(tail -2 "$WORK/connect.out")"
fi

# A2: unidirectional, null group, inline key.
if connect "$HOST2" "$HOSTID2" --dhchap-secret="$K2"; then
  DEV=$(ns_dev) && io_check "$DEV" && ok linux-unidirectional-null || bad linux-unidirectional-null "I/O"
  disconnect
else
  bad linux-unidirectional-null "connect: $(tail -2 "$WORK/connect.out")"
fi

# A3-A5: refusals.
refused() { # refused NAME connect-args...
  local name=$1; shift
  if connect "$@"; then bad "$name" "connected"; disconnect; else ok "$name"; fi
}
refused linux-wrong-key "$HOST1" "$HOSTID1" --dhchap-secret="$KX"
refused linux-no-key "$HOST2" "$HOSTID2"
refused linux-wrong-ctrl-key "$HOST1" "$HOSTID1" --dhchap-secret="$K1" --dhchap-ctrl-secret="$K2"
grep -q "DHHC-1" "$WORK/target.log" && bad secrets-in-log "a DHHC-1 string reached the target log"
kill -0 "$TPID" 2>/dev/null || bad target-alive "target died"
kill -TERM "$TPID" 2>/dev/null; wait "$TPID" 2>/dev/null; TPID=

# ------------------------------------------------------------------ B: nvmet
modprobe "nvmet-$TRTYPE" || die "modprobe nvmet-$TRTYPE"
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
truncate -s 32M "$WORK/nvmet.img"
H=$CFG/hosts/$HOST1
mkdir "$H" || die "mkdir $H"
echo "$K1" >"$H/dhchap_key" || die "dhchap_key"
echo "$C1" >"$H/dhchap_ctrl_key" || die "dhchap_ctrl_key"
echo "hmac(sha512)" >"$H/dhchap_hash" || die "dhchap_hash"
echo ffdhe3072 >"$H/dhchap_dhgroup" || die "dhchap_dhgroup"
S=$CFG/subsystems/$NVMET_NQN
mkdir "$S" || die "mkdir $S"
echo 0 >"$S/attr_allow_any_host"
ln -s "$H" "$S/allowed_hosts/$HOST1" || die "allowed_hosts"
mkdir "$S/namespaces/1"
echo -n "$WORK/nvmet.img" >"$S/namespaces/1/device_path"
echo 1 >"$S/namespaces/1/buffered_io" 2>/dev/null
echo 1 >"$S/namespaces/1/enable" || die "enable namespace"
P=$CFG/ports/2
mkdir "$P"
echo "$TRTYPE" >"$P/addr_trtype"; echo ipv4 >"$P/addr_adrfam"
echo "$IP" >"$P/addr_traddr"; echo "$NPORT" >"$P/addr_trsvcid"
ln -s "$S" "$P/subsystems/$NVMET_NQN" || die "link port"
sleep 1

URL="$TRTYPE://$IP:$NPORT/$NVMET_NQN?hostnqn=$HOST1&hostid=$HOSTID1&reconnect_attempts=0"
if RUST_LOG=warn timeout 300 "$VBIN" "$URL&dhchap_key_file=$WORK/host1.key&dhchap_ctrl_key_file=$WORK/ctrl1.key" \
  >"$WORK/verify.out" 2>&1; then
  ok nvmet-bidi-ffdhe3072-sha512
else
  bad nvmet-bidi-ffdhe3072-sha512 "$(tail -3 "$WORK/verify.out")"
fi
if timeout 120 "$VBIN" "$URL&dhchap_key_file=$WORK/wrong.key" >"$WORK/verify.out" 2>&1; then
  bad nvmet-wrong-key "connected"
elif grep -q "authentication" "$WORK/verify.out"; then ok nvmet-wrong-key
else bad nvmet-wrong-key "$(tail -2 "$WORK/verify.out")"; fi
if timeout 120 "$VBIN" "$URL" >"$WORK/verify.out" 2>&1; then
  bad nvmet-no-key "connected"
elif grep -q "no host key" "$WORK/verify.out"; then ok nvmet-no-key
else bad nvmet-no-key "$(tail -2 "$WORK/verify.out")"; fi

finish
