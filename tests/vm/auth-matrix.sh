#!/usr/bin/env bash
# auth-matrix.sh - run INSIDE the rxe VM on Debian's 6.12 kernel (NVME_AUTH), from the repository
# root: the Linux host (nvme-cli 2.3) against rdmablk-target with every DH-HMAC-CHAP hash and
# DH group the target can be told to choose.
#
#   RXE_VM_KPKG=linux-image-6.12.95+deb12-amd64 tools/rxe-vm/run-in-vm.sh bash tests/vm/auth-matrix.sh
#
# One target start, one host NQN per combination (each host entry forces its dhchap_hash and
# dhchap_dhgroup; the Linux host offers all of them, so the target's choice is what is used).
# Each combination: nvme connect (admin + 1 I/O queue, both authenticate), 1 MiB of random data
# written and read back with O_DIRECT, disconnect. The null group runs host-only
# authentication, every FFDHE group bidirectional (--dhchap-ctrl-secret). dmesg must name the
# hash and group the host authenticated with.
#
# AUTH_MATRIX=full (default, tools/test-rxe): 3 hashes x 6 groups = 18 combinations, ~100 s.
# AUTH_MATRIX=subset: 6 combinations, every hash and every group once.
# AUTH_MATRIX_ONLY="sha256:ffdhe8192 ...": just those.
# Prints "matrix: HASH GROUP SECONDS ok|FAIL" per combination; the last line is
# "RESULT: PASS|FAIL (...)".
#
# Env: RDMABLK_TARGET (default build/debug/rdmablk-target), RXE_VM_IP (10.0.2.15),
#      AUTH_CONNECT_TIMEOUT (seconds for one nvme connect, default 120).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TBIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
IP=${RXE_VM_IP:-10.0.2.15}
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh"  # TRTYPE, nvme_connect
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # small_target_toml
MODE=${AUTH_MATRIX:-full}
CTO=${AUTH_CONNECT_TIMEOUT:-120}
TPORT=4420
NQN=nqn.2026-11.io.rdmablk:vm-auth-matrix
WORK=$(mktemp -d /tmp/rdmablk-authm.XXXXXX)
TPID=
FAILED=()
ROWS=()

HASHES=(sha256 sha384 sha512)
GROUPS_ALL=(null ffdhe2048 ffdhe3072 ffdhe4096 ffdhe6144 ffdhe8192)
COMBOS=()
if [ -n "${AUTH_MATRIX_ONLY:-}" ]; then
  read -r -a COMBOS <<<"$AUTH_MATRIX_ONLY"
elif [ "$MODE" = subset ]; then
  COMBOS=(sha256:null sha384:ffdhe2048 sha512:ffdhe3072 sha256:ffdhe4096 sha384:ffdhe6144 sha512:ffdhe8192)
else
  for h in "${HASHES[@]}"; do for g in "${GROUPS_ALL[@]}"; do COMBOS+=("$h:$g"); done; done
fi

say() { echo "matrix: $*"; }
finish() {
  [ -n "$TPID" ] && kill -TERM "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  echo "hash   group     seconds result"
  for r in "${ROWS[@]}"; do echo "$r"; done
  if [ ${#FAILED[@]} -eq 0 ]; then
    echo "RESULT: PASS (DH-HMAC-CHAP matrix, $MODE: ${#COMBOS[@]} hash/group combinations, Linux host <-> rdmablk-target, verified I/O each)"
    exit 0
  fi
  echo "----- target log (last 40 lines) -----"; tail -n 40 "$WORK/target.log" 2>/dev/null
  echo "----- dmesg (last 40 lines) -----"; dmesg | tail -n 40
  echo "RESULT: FAIL (${FAILED[*]})"
  exit 1
}
die() { say "FAIL setup: $*"; FAILED+=(setup); finish; }

[ -x "$TBIN" ] || die "no target binary at $TBIN (cargo build -p rdmablk-target)"
command -v nvme >/dev/null || die "nvme-cli is missing"
modprobe nvme-rdma || die "modprobe nvme-rdma"
[ -e /sys/module/nvme_auth ] || modprobe nvme-auth 2>/dev/null || true
[ -e /sys/module/nvme_auth ] || die "kernel $(uname -r) has no NVMe in-band authentication (use RXE_VM_KPKG=linux-image-6.12.95+deb12-amd64)"

KEY=$(nvme gen-dhchap-key -m 0 -l 32) || die "gen-dhchap-key"
CKEY=$(nvme gen-dhchap-key -m 0 -l 48) || die "gen-dhchap-key"

host_of() { # host_of INDEX -> NQN
  printf 'nqn.2014-08.org.nvmexpress:uuid:6a0f5f2c-1f7e-4a1b-9a53-%012d' "$1"
}
id_of() { printf '6a0f5f2c-1f7e-4a1b-9a53-%012d' "$1"; }

umask 077
{
  cat <<CFG
[[listener]]
provider = "verbs"
address = "$IP"
port = $TPORT

CFG
  small_target_toml
  cat <<CFG

[[subsystem]]
nqn = "$NQN"
hosts = [
CFG
  i=0
  for c in "${COMBOS[@]}"; do
    i=$((i + 1)); h=${c%%:*}; g=${c#*:}
    ctrl=
    [ "$g" != null ] && ctrl=", dhchap_ctrl_key = \"$CKEY\""
    echo "  { nqn = \"$(host_of 100$i)\", dhchap_key = \"$KEY\"$ctrl, dhchap_hash = \"$h\", dhchap_dhgroup = \"$g\" },"
  done
  cat <<CFG
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
io_check() {
  head -c 1048576 /dev/urandom >"$WORK/pattern"
  dd if="$WORK/pattern" of="$1" bs=64k seek=16 oflag=direct conv=fsync status=none || return 1
  dd if="$1" of="$WORK/back" bs=64k skip=16 count=16 iflag=direct status=none || return 1
  cmp -s "$WORK/pattern" "$WORK/back"
}

i=0
for c in "${COMBOS[@]}"; do
  i=$((i + 1)); h=${c%%:*}; g=${c#*:}
  args=(--dhchap-secret="$KEY")
  [ "$g" != null ] && args+=(--dhchap-ctrl-secret="$CKEY")
  mark=$(dmesg | wc -l)
  t0=$(date +%s.%N)
  why=
  # In the background: a connect stuck in the kernel ignores signals; after CTO seconds both
  # sides' logs say where it is.
  nvme connect -t "$TRTYPE" -a "$IP" -s "$TPORT" -n "$NQN" --hostnqn="$(host_of 100$i)" \
    --hostid="$(id_of 100$i)" -i 1 "${args[@]}" >"$WORK/connect.out" 2>&1 &
  cpid=$!
  for _ in $(seq 1 $((CTO * 10))); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$cpid" 2>/dev/null; then
    say "$h $g: nvme connect still running after ${CTO}s"
    echo "----- dmesg since the connect -----"; dmesg | tail -n +"$((mark + 1))" | tail -n 30
    echo "----- target log (last 30 lines) -----"; tail -n 30 "$WORK/target.log"
    FAILED+=("$h/$g"); ROWS+=("$(printf '%-6s %-9s %7s %s' "$h" "$g" ">$CTO" "FAIL (hung)")")
    say "$h $g >$CTO FAIL (connect hung)"
    break
  fi
  if wait "$cpid"; then
    t1=$(date +%s.%N)
    if ! DEV=$(ns_dev) || ! io_check "$DEV"; then why="I/O"; fi
    # The host logs "qid N: authenticated with hash hmac(shaX) dhgroup Y" (6.12).
    hl=$(dmesg | tail -n +"$((mark + 1))" | grep -E 'qid [0-9]+: authenticated' || true)
    if [ -z "$why" ] && ! grep -q "qid 0: authenticated" <<<"$hl"; then why="no 'qid 0: authenticated' in dmesg"; fi
    if [ -z "$why" ] && grep -q "hash" <<<"$hl" && ! grep -q "hmac($h) dhgroup $g" <<<"$hl"; then
      why="dmesg: $(echo "$hl" | head -1)"
    fi
    nvme disconnect -n "$NQN" >/dev/null 2>&1
    sleep 0.5
  else
    t1=$(date +%s.%N)
    why="connect: $(tail -1 "$WORK/connect.out")"
  fi
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [ -z "$why" ]; then res=ok; else res=FAIL; FAILED+=("$h/$g"); fi
  say "$h $g $secs $res${why:+ ($why)}"
  ROWS+=("$(printf '%-6s %-9s %7s %s' "$h" "$g" "$secs" "$res")")
  kill -0 "$TPID" 2>/dev/null || { FAILED+=(target-alive); say "FAIL target died"; break; }
done
grep -q "DHHC-1" "$WORK/target.log" && { FAILED+=(secrets-in-log); say "FAIL a DHHC-1 string reached the target log"; }
finish
