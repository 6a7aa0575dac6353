#!/usr/bin/env bash
# tls-linux-host.sh - run INSIDE the VM booted with the Debian 13 root (tools/rxe-vm/trixie-root.sh)
# and a kernel with NVMe/TCP TLS (6.16 from trixie-backports: NVME_TCP_TLS, NVME_TARGET_TCP_TLS),
# from the repository root:
#
#   tools/test-tls-linux          (builds what it needs and the root, boots the VMs, runs this)
#   tests/vm/tls-linux-host.sh [debian13|ktls-1.4]
#
# NVMe/TCP with TLS 1.3 and PSKs between rdmablk and the Linux kernel, both ways: tlshd does the
# kernel's handshakes, nvme-cli 2.16 (libnvme 1.16) derives the keys it puts in the kernel's
# .nvme keyring.
#   A. the Linux host (`nvme connect --tls`) against rdmablk-target's tcp listener with
#      tls = "required": identity version 0 found in the keyring by the kernel (`nvme
#      check-tls-key --insert --identity=0`), version 1 with its PSK digest (`nvme connect
#      --tls-key`, which inserts a version 1 key and hands it to the kernel); each: connect,
#      the identity and cipher suite rdmablk-target logs, its records in the kernel (kTLS),
#      fio writes and verifies (crc32c) through the namespace, disconnect. A wrong key and a
#      clear-text connect are refused (and the target logs why).
#   B. rdmablk's initiator (rdmablk-perf: 4 KiB..128 KiB random read/write, crc32c-verified,
#      its records in the kernel) against nvmet-tcp with addr_tsas tls1.3, addr_treq required:
#      identity versions 1 and 0 (rdmablk's tls_identity=); a wrong key and clear text refused.
# debian13 (the default; Debian 13 with trixie-backports' 6.16): A and B with SHA-256 keys
#   (TLS_AES_128_GCM_SHA256) under Debian 13's own tlshd (ktls-utils 1.0.0). It is built on
#   GnuTLS 3.8.9, which makes every PSK binder with SHA-256: no SHA-384 PSK of it agrees with an
#   RFC 8446 peer (noted, with what Debian 13's nvme-cli 2.13 inserts for a key against 2.16).
# ktls-1.4: A and B with SHA-384 keys (TLS_AES_256_GCM_SHA384) under ktls-utils 1.4.0's tlshd
#   (forky's, on GnuTLS 3.8.13, /opt/ktls-utils-1.4.0 in the root), which needs a kernel with
#   the TLS_TX_MAX_PAYLOAD_LEN socket option (it fails every handshake on 6.16): 7.3 from
#   trixie-backports.
# Each check prints "tls: ok|FAIL <name>"; the last line is "RESULT: PASS|FAIL (...)".
#
# Env: RDMABLK_TARGET (build/debug/rdmablk-target), PERF_BIN (build/debug/rdmablk-perf),
#      RDMABLK_CTL (build/debug/rdmablk-ctl), RXE_VM_IP (10.0.2.15).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
PERF=${PERF_BIN:-$ROOT/build/debug/rdmablk-perf}
CTL=${RDMABLK_CTL:-$ROOT/build/debug/rdmablk-ctl}
IP=${RXE_VM_IP:-10.0.2.15}
MODE=${1:-debian13}
PORT=4420
NPORT=4421
NQN=nqn.2026-12.io.rdmablk:vm-tls-target  # neither NQN starts with the other (see the notes)
NVMET_NQN=nqn.2026-12.io.rdmablk:vm-tls-nvmet
UUID=7b1e0c2a-4f3d-4c8e-9d2a-00000000000
HOST1=nqn.2014-08.org.nvmexpress:uuid:${UUID}1  # SHA-256, identity 0 from the keyring
HOST2=nqn.2014-08.org.nvmexpress:uuid:${UUID}2  # SHA-384, both identities
HOST3=nqn.2014-08.org.nvmexpress:uuid:${UUID}3  # SHA-256, identity 1 through --tls-key
NEW_TLSHD=/opt/ktls-utils-1.4.0
OLD_NVME=/opt/nvme-cli-2.13
WORK=$(mktemp -d /tmp/rdmablk-tls.XXXXXX)
CFG=/sys/kernel/config/nvmet
TPID=
TLSHD=
LOOP=
HASH=
CLEAR=
FAILED=()

say() { echo "tls: $*"; }
ok() { say "ok $1"; }
bad() { say "FAIL $1${2:+: $2}"; FAILED+=("$1"); }
fail() { bad setup "$*"; finish; }  # lib.sh's helpers call fail for what ends the run
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # start_target, ns_dev, perf_ok

nvmet_cleanup() {
  [ -d "$CFG/subsystems/$NVMET_NQN" ] || return 0
  rm -f "$CFG/ports/2/subsystems/$NVMET_NQN"
  rmdir "$CFG/ports/2"
  rm -f "$CFG/subsystems/$NVMET_NQN/allowed_hosts/"*
  echo 0 >"$CFG/subsystems/$NVMET_NQN/namespaces/1/enable"
  rmdir "$CFG/subsystems/$NVMET_NQN/namespaces/1" "$CFG/subsystems/$NVMET_NQN"
  rmdir "$CFG/hosts/"*
  [ -n "$LOOP" ] && losetup -d "$LOOP"
} 2>/dev/null
stop_tlshd() { [ -n "$TLSHD" ] && kill "$TLSHD" 2>/dev/null && wait "$TLSHD" 2>/dev/null; TLSHD=; }
finish() {
  trap - EXIT
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  [ -n "$TPID" ] && kill -TERM "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  nvmet_cleanup
  stop_tlshd
  if [ ${#FAILED[@]} -eq 0 ]; then
    echo "RESULT: PASS ($MODE: NVMe/TCP TLS 1.3 PSK on $(uname -r) with $HASH keys: Linux host -> rdmablk-target (fio crc32c verify) and rdmablk-perf -> nvmet-tcp (verified), identity versions 0 and 1; a wrong key refused both ways${CLEAR:+, clear text refused both ways})"
    exit 0
  fi
  echo "----- target log (last 30 lines) -----"; tail -n 30 "$WORK/target.log" 2>/dev/null
  echo "----- tlshd (last 30 lines) -----"; tail -n 30 "$WORK/tlshd.log" 2>/dev/null
  echo "----- dmesg (last 20 lines) -----"; dmesg | tail -n 20
  echo "RESULT: FAIL (${FAILED[*]})"
  exit 1
}
trap finish EXIT

# ------------------------------------------------------------------ setup
for b in "$BIN" "$PERF" "$CTL"; do
  [ -x "$b" ] || fail "no $b (cargo build -p rdmablk-target --bin rdmablk-target --bin rdmablk-ctl -p rdmablk-tools --bin rdmablk-perf)"
done
for t in nvme tlshd keyctl fio python3 "$NEW_TLSHD/tlshd"; do
  command -v "$t" >/dev/null || fail "no $t: boot with RXE_VM_ROOT=\$(tools/rxe-vm/trixie-root.sh)"
done
say "$(nvme version | head -1)"
for m in tls nvme-tcp nvmet nvmet-tcp loop; do modprobe "$m" || fail "modprobe $m on $(uname -r)"; done
keyctl show %:.nvme >/dev/null 2>&1 || fail "no .nvme keyring (kernel $(uname -r) without NVME_KEYRING?)"

# start_tlshd [DIR]: tlshd (Debian 13's, or the one in DIR with its libraries) serving the
# kernel's handshake requests for both ends; it links .nvme into its session keyring, where it
# looks up the identity (server) or reads the key the kernel names (client).
cat >"$WORK/tlshd.conf" <<'CONF'
[debug]
loglevel=1
tls=0
nl=0

[authenticate]
keyrings=.nvme
CONF
start_tlshd() {
  stop_tlshd
  local run=(tlshd)
  [ -n "${1:-}" ] && run=(env "LD_LIBRARY_PATH=$1/lib" "$1/tlshd")
  say "$("${run[@]}" --version 2>&1 | head -n 1)"
  "${run[@]}" -c "$WORK/tlshd.conf" -s >>"$WORK/tlshd.log" 2>&1 &
  TLSHD=$!
  sleep 1
  kill -0 "$TLSHD" 2>/dev/null || fail "tlshd ${1:-} exited: $(tail -n 3 "$WORK/tlshd.log")"
}

# identity_of VERSION HASH HOSTNQN SUBNQN: the description of the psk key of that kind in .nvme
# (with -s: its serial)
identity_of() {
  local k d serial=0
  [ "$1" = -s ] && { serial=1; shift; }
  for k in $(keyctl rlist %:.nvme 2>/dev/null); do
    d=$(keyctl rdescribe "$k" 2>/dev/null) || continue
    d=${d#*;*;*;*;}
    case $d in "NVMe$1R0$2 $3 $4 "*|"NVMe$1R0$2 $3 $4")
      if [ $serial = 1 ]; then echo "$k"; else echo "$d"; fi; return 0 ;;
    esac
  done
  return 1
}
# insert HOSTNQN SUBNQN VERSION KEY: nvme-cli 2.16 derives the TLS PSK of that identity and puts
# it in .nvme (replacing a key of the same identity)
insert() {
  nvme check-tls-key --insert --hostnqn="$1" --subsysnqn="$2" --identity="$3" --keydata="$4" \
    >"$WORK/insert.out" 2>&1 || { say "nvme check-tls-key --insert: $(cat "$WORK/insert.out")"; return 1; }
}

umask 077
K1=$(nvme gen-tls-key --hmac=1) || fail "nvme gen-tls-key"
K2=$("$CTL" gen-tls-key --hmac 2) || fail "rdmablk-ctl gen-tls-key"
K3=$("$CTL" gen-tls-key --hmac 1) || fail "rdmablk-ctl gen-tls-key"
KX=$(nvme gen-tls-key --hmac=1) || fail "nvme gen-tls-key"
KX2=$(nvme gen-tls-key --hmac=2) || fail "nvme gen-tls-key"
KB1=$(nvme gen-tls-key --hmac=1) || fail "nvme gen-tls-key"
KB2=$("$CTL" gen-tls-key --hmac 2) || fail "rdmablk-ctl gen-tls-key"
KB3=$("$CTL" gen-tls-key --hmac 1) || fail "rdmablk-ctl gen-tls-key"
echo "$K2" >"$WORK/host2.psk"

# ------------------------------------------------------------------ rdmablk-target, nvmet
{ cat <<CFG
[[listener]]
transport = "tcp"
address = "$IP"
port = $PORT
tls = "required"

CFG
small_target_toml
cat <<CFG

[[subsystem]]
nqn = "$NQN"
hosts = [
  { nqn = "$HOST1", tls_psk = "$K1" },
  { nqn = "$HOST2", tls_psk_file = "$WORK/host2.psk" },
  { nqn = "$HOST3", tls_psk = "$K3" },
]

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = { kind = "ram", size = "32MiB" }
CFG
} >"$WORK/target.toml"
start_target

truncate -s 64M "$WORK/nvmet.img" || fail "create the nvmet image"
LOOP=$(losetup -f --show --sector-size 512 "$WORK/nvmet.img") || fail "losetup"
S=$CFG/subsystems/$NVMET_NQN
mkdir "$S" || fail "mkdir $S"
echo 0 >"$S/attr_allow_any_host"
for h in "$HOST1" "$HOST2" "$HOST3"; do
  mkdir "$CFG/hosts/$h" && ln -s "$CFG/hosts/$h" "$S/allowed_hosts/$h" || fail "allow $h"
done
mkdir "$S/namespaces/1" && echo -n "$LOOP" >"$S/namespaces/1/device_path" &&
  echo 1 >"$S/namespaces/1/enable" || fail "nvmet namespace: $(dmesg | tail -n 2)"
P=$CFG/ports/2
mkdir "$P" || fail "mkdir $P"
echo tcp >"$P/addr_trtype"; echo ipv4 >"$P/addr_adrfam"
echo "$IP" >"$P/addr_traddr"; echo "$NPORT" >"$P/addr_trsvcid"
echo tls1.3 >"$P/addr_tsas" || fail "addr_tsas tls1.3: $(dmesg | tail -n 2)"
echo required >"$P/addr_treq" || fail "addr_treq required"
ln -s "$S" "$P/subsystems/$NVMET_NQN" || fail "link the subsystem to port 2: $(dmesg | tail -n 2)"
say "nvmet port 2 ($IP:$NPORT): tsas $(cat "$P/addr_tsas"), treq $(cat "$P/addr_treq")"

# ------------------------------------------------------------------ checks
connect() { # connect HOSTNQN ARGS...
  local h=$1; shift
  timeout 120 nvme connect -t tcp -a "$IP" -s "$PORT" -n "$NQN" --hostnqn="$h" \
    --hostid="${h##*uuid:}" -i 2 "$@" >"$WORK/connect.out" 2>&1
}
disconnect() { nvme disconnect -n "$NQN" >/dev/null 2>&1; sleep 0.5; }

# fio_verify NAME DEV: writes with crc32c verify headers and reads everything back, 4 KiB
# random at QD8 and 128 KiB sequential (fio fails on the first block that does not verify).
fio_verify() {
  fio --name="$1-4k" --filename="$2" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
      --iodepth=8 --size=8m --verify=crc32c --verify_fatal=1 --do_verify=1 \
      --name="$1-128k" --stonewall --filename="$2" --direct=1 --ioengine=libaio --rw=write \
      --bs=128k --iodepth=4 --offset=8m --size=16m --verify=crc32c --verify_fatal=1 \
      --do_verify=1 >"$WORK/fio-$1.out" 2>&1 || { tail -n 15 "$WORK/fio-$1.out"; return 1; }
  grep -E '^ *(READ|WRITE):' "$WORK/fio-$1.out" | sed -E 's/^ *([A-Z]+): bw=([^ ]+).*io=([^ ]+).*/  fio \1 \2, \3/'
}

# linux_host NAME HOSTNQN IDENTITY CIPHER CONNECT-ARGS...: the Linux host connects, rdmablk-target
# logs the handshake with an identity starting with IDENTITY and CIPHER, its records in the
# kernel (kTLS: the Linux host's need the tls module, so the kernel has it), fio verifies.
linux_host() {
  local name=$1 h=$2 want_id=$3 want_cipher=$4 from dev line id cipher layer; shift 4
  from=$(($(wc -l <"$WORK/target.log") + 1))
  if ! connect "$h" "$@"; then bad "$name" "connect: $(tail -n 2 "$WORK/connect.out")"; return; fi
  line=$(tail -n +"$from" "$WORK/target.log" | grep 'NVMe/TCP TLS established' | head -n 1)
  id=$(sed -n 's/.* identity="\([^"]*\)".*/\1/p' <<<"$line")
  cipher=$(sed -n 's/.* cipher="\([^"]*\)".*/\1/p' <<<"$line")
  layer=$(sed -n 's/.* record_layer="\([^"]*\)".*/\1/p' <<<"$line")
  say "  rdmablk-target: $cipher, identity $id, records: ${layer:-?}"
  if [ "${id% *}" != "$want_id" ] && [ "$id" != "$want_id" ] || [ "$cipher" != "$want_cipher" ]; then
    bad "$name" "the handshake was not $want_id with $want_cipher"
  elif [ "$layer" != kernel ]; then
    bad "$name" "rdmablk-target's records were not in the kernel (kTLS): ${layer:-none logged}"
  elif dev=$(ns_dev) && fio_verify "$name" "$dev"; then ok "$name"
  else bad "$name" "I/O on ${dev:-no device}"; fi
  disconnect
}

# linux_refused NAME WHY-PATTERN CONNECT-ARGS...: the connect fails and the target logs WHY
linux_refused() {
  local name=$1 why=$2 from; shift 2
  from=$(($(wc -l <"$WORK/target.log") + 1))
  if connect "$@"; then bad "$name" "connected"; disconnect; return; fi
  sleep 1
  if tail -n +"$from" "$WORK/target.log" | grep "$why" >/dev/null; then ok "$name"
  else bad "$name" "refused, but the target did not log '$why': $(tail -n 2 "$WORK/target.log")"; fi
}

# perf NAME QUERY: rdmablk-perf's verified random I/O against nvmet's TLS port
perf() {
  RUST_LOG=info timeout 300 "$PERF" "tcp://$IP:$NPORT/$NVMET_NQN?$2" --rw randrw \
    --bs 4k-128k --iodepth 8 --size 16m --verify crc32c --json -q >"$WORK/perf-$1.json" \
    2>"$WORK/perf-$1.log"
}
nvmet_host() { # nvmet_host NAME HOSTNQN KEY [QUERY]: verified I/O, the host's records in kTLS
  if ! perf "$1" "hostnqn=$2&hostid=${2##*uuid:}&psk=$3${4:+&$4}" || ! perf_ok "$WORK/perf-$1.json"
  then bad "$1" "$(tail -n 2 "$WORK/perf-$1.log")"
  elif ! grep -q "records go through the kernel's TLS record layer" "$WORK/perf-$1.log"; then
    bad "$1" "rdmablk-perf's records were not in the kernel (kTLS)"
  else ok "$1"; fi
}
nvmet_refused() { # nvmet_refused NAME HOSTNQN QUERY
  if perf "$1" "hostnqn=$2&hostid=${2##*uuid:}${3:+&$3}"; then bad "$1" "rdmablk-perf succeeded"
  else ok "$1"; say "  $(grep -E 'failure|error' "$WORK/perf-$1.log" | tail -n 1 | sed 's/.*: transport/transport/')"; fi
}

# key_hex KEYRING-DESC: the bytes of that psk key in .nvme, in hex (read in a session keyring
# with .nvme linked: nvme-cli's keys are readable by their possessor only)
key_hex() {
  keyctl session - sh -c 'keyctl link %:.nvme @s && keyctl pipe "$(keyctl search @s psk "$1")"' \
    sh "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n'
}

case $MODE in
debian13)
  HASH=SHA-256 CLEAR=1
  say "SHA-256 keys, Debian 13's tlshd (ktls-utils 1.0.0)"
  start_tlshd
  insert "$HOST1" "$NQN" 0 "$K1" || bad linux-v0-sha256 "insert"
  linux_host linux-v0-sha256 "$HOST1" "NVMe0R01 $HOST1 $NQN" TLS_AES_128_GCM_SHA256 --tls
  linux_host linux-v1-sha256 "$HOST3" "NVMe1R01 $HOST3 $NQN" TLS_AES_128_GCM_SHA256 --tls \
    --tls-key="$K3"
  say "  keyring: $(identity_of 1 1 "$HOST3" "$NQN" || echo "no NVMe1R01 key for HOST3")"
  insert "$HOST1" "$NQN" 0 "$KX" || bad linux-wrong-key "insert"
  linux_refused linux-wrong-key 'binder does not verify' "$HOST1" --tls
  linux_refused linux-clear-text 'did not start TLS' "$HOST1"

  insert "$HOST1" "$NVMET_NQN" 1 "$KB1" || bad nvmet-v1-sha256 "insert"
  insert "$HOST3" "$NVMET_NQN" 0 "$KB3" || bad nvmet-v0-sha256 "insert"
  nvmet_host nvmet-v1-sha256 "$HOST1" "$KB1"
  nvmet_host nvmet-v0-sha256 "$HOST3" "$KB3" tls_identity=0
  nvmet_refused nvmet-wrong-key "$HOST1" "psk=$KX"
  nvmet_refused nvmet-clear-text "$HOST1" ""

  # Notes, no verdicts. This tlshd with a SHA-384 key (GnuTLS 3.8.9's binder is SHA-256's):
  insert "$HOST2" "$NQN" 0 "$K2" >/dev/null
  if connect "$HOST2" --tls; then say "note: Debian 13's tlshd connected with a SHA-384 key"; disconnect
  else say "note: Debian 13's tlshd with a SHA-384 key: rdmablk-target: $(grep 'TLS: connection refused' "$WORK/target.log" | tail -n 1 | sed 's/.*why=//')"; fi
  # The kernel looks a key up by "NVMe1R0x <host> <subsystem>" as a prefix of the key's
  # description: a version 1 key of a subsystem whose NQN starts with this one's matches too.
  insert "$HOST1" "$NQN-2" 1 "$KB1" >/dev/null
  from=$(($(wc -l <"$WORK/target.log") + 1))
  if connect "$HOST1" --tls; then say "note: the host used the key of $NQN"; disconnect
  else say "note: with a version 1 key for $NQN-2 in .nvme, the host's --tls connect to $NQN: rdmablk-target: $(tail -n +"$from" "$WORK/target.log" | grep 'TLS: connection refused' | tail -n 1 | sed 's/.*why=//')"; fi
  keyctl unlink "$(identity_of -s 1 1 "$HOST1" "$NQN-2")" %:.nvme >/dev/null ||
    fail "cannot remove the key of $NQN-2"
  # Debian 13's nvme-cli 2.13 (libnvme 1.13) and 2.16 for the same key and identity
  if LD_LIBRARY_PATH=$OLD_NVME/lib "$OLD_NVME/nvme" check-tls-key --insert --hostnqn="$HOST1" \
       --subsysnqn="$NQN" --identity=0 --keydata="$K1" >"$WORK/old.out" 2>&1; then
    old=$(key_hex "NVMe0R01 $HOST1 $NQN")
    connect "$HOST1" --tls && disconnect && with_old=connects ||
      with_old="is refused: $(grep 'TLS: connection refused' "$WORK/target.log" | tail -n 1 | sed 's/.*why=//')"
    insert "$HOST1" "$NQN" 0 "$K1"
    new=$(key_hex "NVMe0R01 $HOST1 $NQN")
    if [ -z "$old" ] || [ -z "$new" ]; then say "note: cannot read the keys nvme-cli 2.13 and 2.16 inserted"
    elif [ "$old" = "$new" ]; then say "note: nvme-cli 2.13 inserts the same TLS PSK as 2.16"
    else say "note: nvme-cli 2.13 (libnvme 1.13) inserts another TLS PSK than 2.16 for the same key and identity; the Linux host keyed by it $with_old"; fi
  else
    say "note: nvme-cli 2.13 check-tls-key --insert: $(tail -n 1 "$WORK/old.out")"
  fi
  ;;
ktls-1.4)
  HASH=SHA-384 CLEAR=
  say "SHA-384 keys, tlshd of ktls-utils 1.4.0 (GnuTLS 3.8.13)"
  start_tlshd "$NEW_TLSHD"
  # version 0 first: the kernel prefers a version 1 key of the host and subsystem in .nvme
  # when there is one (nvme_tls_psk_default), and --tls-key below leaves one there
  insert "$HOST2" "$NQN" 0 "$K2" || bad linux-v0-sha384 "insert"
  linux_host linux-v0-sha384 "$HOST2" "NVMe0R02 $HOST2 $NQN" TLS_AES_256_GCM_SHA384 --tls
  insert "$HOST2" "$NQN" 0 "$KX2" || bad linux-wrong-key-sha384 "insert"
  linux_refused linux-wrong-key-sha384 'binder does not verify' "$HOST2" --tls
  linux_host linux-v1-sha384 "$HOST2" "NVMe1R02 $HOST2 $NQN" TLS_AES_256_GCM_SHA384 --tls \
    --tls-key="$K2"
  say "  keyring: $(identity_of 1 2 "$HOST2" "$NQN" || echo "no NVMe1R02 key for HOST2")"

  insert "$HOST2" "$NVMET_NQN" 0 "$KB2" || bad nvmet-v0-sha384 "insert"
  insert "$HOST2" "$NVMET_NQN" 1 "$KB2" || bad nvmet-v1-sha384 "insert"
  nvmet_host nvmet-v0-sha384 "$HOST2" "$KB2" tls_identity=0
  nvmet_host nvmet-v1-sha384 "$HOST2" "$KB2"
  nvmet_refused nvmet-wrong-key-sha384 "$HOST2" "psk=$KX2"
  ;;
*) fail "unknown mode $MODE (debian13 or ktls-1.4)" ;;
esac

grep -q "NVMeTLSkey" "$WORK/target.log" && bad secrets-in-log "a key reached the target log"
kill -0 "$TPID" 2>/dev/null || bad target-alive "rdmablk-target died"
finish
