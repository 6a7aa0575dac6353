#!/usr/bin/env bash
# ktls.sh - run INSIDE the VM (a kernel with kTLS: `modprobe tls`): NVMe/TCP over TLS 1.3 with
# a PSK, its records in the kernel on both sides after the OpenSSL handshake (docs/tcp.md).
#
#   RXE_VM_KPKG=linux-image-6.12.95+deb12-amd64 tools/rxe-vm/run-in-vm.sh bash tests/vm/ktls.sh
#
# rdmablk-target with a tls = "required" listener and target.tls_record_layer = "kernel" (a
# connection whose keys the kernel does not take is closed), two subsystems keyed for the two
# cipher suites (TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384); for each suite:
#   - the initiator's `verify` example (every power-of-two size from one block to 1 MiB,
#     sync, zero-copy and async, flush) and rdmablk-perf (crc32c-verified writes read back,
#     random sizes 4 KiB..1 MiB, QD8), both with tls_record_layer=kernel;
# then checks that kTLS really carried every connection: each "NVMe/TCP TLS established" line
# of the target says record_layer "kernel" and none "user", each initiator queue's line too,
# `rdmablk-ctl status` counts them all as kernel and none as user, and the kernel's own
# counters (/proc/net/tls_stat TlsTxSw, TlsRxSw) grew by a session per side and direction.
# With LIBTEST (the rdmablk lib's unit-test binary, as tools/test-rxe builds it) its
# nvme::tls tests run here too: OpenSSL's records against the kernel's both ways, a host's
# close_notify and a KeyUpdate named by the kernel's side, a megabyte each way with both ends
# in the kernel.
#
# Needs: build/debug/{rdmablk-target,rdmablk-ctl,rdmablk-perf,examples/verify} (or
# RDMABLK_TARGET, RDMABLK_CTL, PERF_BIN, VERIFY_BIN), python3. Prints PASS or FAIL.
# Env: RXE_VM_IP (10.0.2.15), PORT (4420), LIBTEST.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RDMABLK_TARGET:-$ROOT/build/debug/rdmablk-target}
CTL=${RDMABLK_CTL:-$ROOT/build/debug/rdmablk-ctl}
PERF=${PERF_BIN:-$ROOT/build/debug/rdmablk-perf}
VERIFY=${VERIFY_BIN:-$ROOT/build/debug/examples/verify}
LIBTEST=${LIBTEST:-}
IP=${RXE_VM_IP:-10.0.2.15}
PORT=${PORT:-4420}
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:2b7d3c1e-5a4f-4e6d-8c9b-0a1b2c3d4e5f
SUB=nqn.2026-12.io.rdmablk:ktls
NQN=$SUB-256  # lib.sh's
WORK=$(mktemp -d /tmp/rdmablk-ktls.XXXXXX)
TPID=

say() { echo "ktls: $*"; }
fail() {
  say "FAIL: $*"
  echo "----- target log (last 40 lines) -----"
  tail -n 40 "$WORK/target.log" 2>/dev/null
  [ -n "$TPID" ] && kill -TERM "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  echo "RESULT: FAIL ($*)"
  exit 1
}
# shellcheck source=tests/vm/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # start_target, perf_ok

for b in "$BIN" "$CTL" "$PERF" "$VERIFY"; do
  [ -x "$b" ] || fail "$b missing (cargo build -p rdmablk-target -p rdmablk-tools, --example verify)"
done
[ "$(id -u)" = 0 ] || fail "must run as root (inside the VM)"
modprobe tls || fail "modprobe tls: this kernel has no kTLS module"
[ -r /proc/net/tls_stat ] || fail "no /proc/net/tls_stat after modprobe tls"
say "kernel $(uname -r), kTLS loaded"

# tls_stat NAME: a counter of the kernel's TLS statistics.
tls_stat() { awk -v n="$1" '$1 == n { print $2 }' /proc/net/tls_stat; }

for h in 1 2; do
  "$CTL" gen-tls-key --hmac $h > "$WORK/key$h" || fail "rdmablk-ctl gen-tls-key --hmac $h"
done
cat > "$WORK/target.toml" <<EOF
[[listener]]
transport = "tcp"
address = "$IP"
port = $PORT
tls = "required"

[target]
worker_threads = 1
tls_record_layer = "kernel"

[control]
socket = "$WORK/ctl.sock"

[arena]
bytes = "96MiB"
lock = false

[limits]
max_io_size = 1048576

[[subsystem]]
nqn = "$SUB-256"
hosts = [ { nqn = "$HOSTNQN", tls_psk_file = "$WORK/key1" } ]

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = { kind = "ram", size = "40MiB" }

[[subsystem]]
nqn = "$SUB-384"
hosts = [ { nqn = "$HOSTNQN", tls_psk_file = "$WORK/key2" } ]

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = { kind = "ram", size = "40MiB" }
EOF
tx0=$(tls_stat TlsTxSw) rx0=$(tls_stat TlsRxSw)
start_target

# Each host connection's queues log "NVMe/TCP TLS established" with their record layer.
export RUST_LOG=rdmablk_initiator::transport=debug,rdmablk=info
queues=0
for h in 1 2; do
  sub=$SUB-$([ $h = 1 ] && echo 256 || echo 384)
  url="tcp://$IP:$PORT/$sub?hostnqn=$HOSTNQN&psk_file=$WORK/key$h&tls_record_layer=kernel"
  t0=$(date +%s)
  say "suite $h: verify example (512 B .. 1 MiB) through kTLS"
  timeout 300 "$VERIFY" "$url&max_io_bytes=1048576" > "$WORK/verify$h.out" 2> "$WORK/verify$h.log"
  rc=$?
  tail -n 2 "$WORK/verify$h.out"
  [ $rc = 0 ] && grep -qx PASS "$WORK/verify$h.out" || { tail -n 5 "$WORK/verify$h.log"; fail "suite $h: verify exited $rc"; }
  say "suite $h: verify took $(( $(date +%s) - t0 )) s"
  say "suite $h: rdmablk-perf crc32c verify, 4k-1m, QD8, 8 MiB written and read back"
  timeout 300 "$PERF" "$url&max_io_bytes=1048576" --rw write --bs 4k-1m --iodepth 8 \
    --size 8m --verify crc32c --json -q > "$WORK/perf$h.json" 2> "$WORK/perf$h.log"
  rc=$?
  [ $rc = 0 ] || { tail -n 5 "$WORK/perf$h.log"; fail "suite $h: rdmablk-perf exited $rc"; }
  perf_ok "$WORK/perf$h.json" || fail "suite $h: rdmablk-perf report"
  say "suite $h: $(( $(date +%s) - t0 )) s"
  for log in "$WORK/verify$h.log" "$WORK/perf$h.log"; do
    n=$(grep -c 'NVMe/TCP TLS established' "$log")
    k=$(grep 'NVMe/TCP TLS established' "$log" | grep -c 'record_layer="\?kernel')
    [ "$n" -ge 2 ] && [ "$n" = "$k" ] ||
      fail "suite $h: $log: $k of $n queues through kTLS (want all, at least 2)"
    grep -q "records go through the kernel's TLS record layer" "$log" ||
      fail "suite $h: $log: the initiator did not log kTLS"
    ! grep -q "OpenSSL's record layer" "$log" || fail "suite $h: $log: user-space records"
    queues=$((queues + n))
  done
done

say "the target's side: every TLS connection through kTLS"
n=$(grep -c 'NVMe/TCP TLS established' "$WORK/target.log")
k=$(grep 'NVMe/TCP TLS established' "$WORK/target.log" | grep -c 'record_layer="\?kernel')
grep 'NVMe/TCP TLS established' "$WORK/target.log" | tail -n 1
[ "$n" = "$queues" ] && [ "$k" = "$n" ] ||
  fail "target: $k of $n connections through kTLS, the hosts made $queues"
for c in TLS_AES_128_GCM_SHA256 TLS_AES_256_GCM_SHA384; do
  grep 'NVMe/TCP TLS established' "$WORK/target.log" | grep "$c" >/dev/null || fail "target: no $c connection"
done
"$CTL" -s "$WORK/ctl.sock" status --json > "$WORK/status.json" || fail "rdmablk-ctl status"
python3 - "$WORK/status.json" "$queues" <<'PY' || fail "rdmablk-ctl status: tls_connections"
import json, sys
t = json.load(open(sys.argv[1]))["result"]["tls_connections"]
print(f"rdmablk-ctl status: tls_connections {t}")
sys.exit(0 if t == {"kernel": int(sys.argv[2]), "user": 0} else 1)
PY
tx=$(( $(tls_stat TlsTxSw) - tx0 )) rx=$(( $(tls_stat TlsRxSw) - rx0 ))
say "/proc/net/tls_stat: $tx TX and $rx RX sessions installed (both ends of $queues connections)"
[ "$tx" = $((2 * queues)) ] && [ "$rx" = $((2 * queues)) ] ||
  fail "the kernel installed $tx TX / $rx RX sessions, want $((2 * queues)) each"

kill -TERM "$TPID"; wait "$TPID"; rc=$?; TPID=
[ $rc = 0 ] || fail "the target exited $rc on SIGTERM"

if [ -n "$LIBTEST" ]; then
  say "the lib's nvme::tls tests against this kernel's kTLS"
  tx0=$(tls_stat TlsTxSw)
  timeout 300 "$LIBTEST" nvme::tls:: > "$WORK/libtest.log" 2>&1 || { tail -n 20 "$WORK/libtest.log"; fail "lib tests nvme::tls"; }
  grep -E '^test result' "$WORK/libtest.log"
  # Per suite: the target's end beside a user-space host, then both ends: 3 TX sessions.
  tx=$(( $(tls_stat TlsTxSw) - tx0 ))
  [ "$tx" -ge 6 ] || fail "the lib's tests installed $tx kTLS TX sessions, want 6: their kTLS half did not run"
fi
rm -rf "$WORK"
echo "RESULT: PASS ($queues connections, kTLS on both sides, both suites)"
