#!/usr/bin/env bash
# idle-controllers-rdma.sh - run INSIDE the VM (tools/rxe-vm/run-in-vm.sh): what connected but
# idle NVMe/RDMA controllers cost rdmablk-target, over rxe0, with a default configuration (a
# verbs listener, one subsystem with a null namespace, no [arena], no [limits]: what the README
# invites). The initiator's `idle` example connects CONTROLLERS controllers (an admin queue and
# one 128-deep I/O queue each, the Linux host's queue size; a 1 MiB buffer pool each, not the
# initiator's 16 MiB, or the host fills the VM's memory near 330 controllers; KATO_MS, if set,
# their keep-alive timeout) and holds them; the target's resident (VmRSS) and pinned (VmLck)
# memory and its arena's use (`rdmablk-ctl status`) are read
# before and with them all connected. A target that refuses some (a full arena: the CM reject
# the host reports) is reported with how many it took. Then a new host's controller connects and
# reads block 0 ("a new host still served"). Prints "rdmablk-rdma: ..." lines and PASS, or FAIL
# when the host could not connect at all. A measurement for docs/benchmarks.md (issue 46), not
# a test: nothing is asserted on the figures.
#
#   tools/rxe-vm/run-in-vm.sh bash tests/vm/idle-controllers-rdma.sh
#
# Also prints where the resident growth lies, by mapping (smaps). Env: MONITOR (1: a line of both processes' figures every 5 s), CONTROLLERS (200: the VM's
# emulated CPU connects a few a second), TARGET_BIN
# (build/release/rdmablk-target; another build's binary to compare), CTL_BIN
# (build/release/rdmablk-ctl), IDLE_BIN (build/release/examples/idle), RXE_VM_IP (10.0.2.15).
set -uo pipefail

HERE=$(cd "$(dirname "$0")/../.." && pwd)
TGT=${TARGET_BIN:-$HERE/build/release/rdmablk-target}
CTL=${CTL_BIN:-$HERE/build/release/rdmablk-ctl}
IDLE=${IDLE_BIN:-$HERE/build/release/examples/idle}
N=${CONTROLLERS:-200}
KATO=${KATO_MS:+&kato_ms=$KATO_MS}
IP=${RXE_VM_IP:-10.0.2.15}
NQN=nqn.2026-12.io.rdmablk:idle-rdma
PORT=4420
W=$(mktemp -d /tmp/idle-rdma.XXXXXX)
HPID=
fail() { echo "FAIL: $*"; exit 1; }

for b in "$TGT" "$CTL" "$IDLE"; do
  [ -x "$b" ] || fail "$b missing: cargo build --release -p rdmablk-target -p rdmablk-initiator --example idle"
done
case $N in '' | *[!0-9]*) fail "CONTROLLERS must be a whole number (got '$N')" ;; esac
ulimit -n $((4 * N + 1024)) || fail "cannot raise the open-file limit"
ulimit -l unlimited 2>/dev/null || true

cat >"$W/target.toml" <<EOF
[[listener]]
provider = "verbs"
address = "$IP"
port = $PORT

[control]
socket = "$W/ctl.sock"

[[subsystem]]
nqn = "$NQN"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 4096
backend = { kind = "null", size = "1GiB" }
EOF

TPID=
MPID=
cleanup() {
  [ -n "$MPID" ] && kill "$MPID" 2>/dev/null
  [ -n "$HPID" ] && kill "$HPID" 2>/dev/null
  [ -n "$TPID" ] && { kill "$TPID" 2>/dev/null; wait "$TPID" 2>/dev/null; }
  [ -n "${KEEP_LOG:-}" ] && cp "$W/target.log" "$KEEP_LOG"
  rm -rf "$W"
}
trap cleanup EXIT
say() { echo "rdmablk-rdma: $*"; }
BIN=$TGT WORK=$W
# shellcheck source=tests/vm/lib.sh
source "$HERE/tests/vm/lib.sh"
start_target

kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
arena() { "$CTL" --socket "$W/ctl.sock" status 2>/dev/null | grep -iE 'arena|parcel|srq|receive' | head -4; }
# Resident KiB of the target by mapping (its path, [heap], [stack], or [anon]), sorted by name.
by_mapping() {
  awk '/^[0-9a-f]+-[0-9a-f]+ / { name = (NF >= 6 ? $6 : "[anon]") } /^Rss:/ { r[name] += $2 }
       END { for (n in r) print n, r[n] }' "/proc/$1/smaps" | sort
}
used() { awk '/^MemTotal:/ { t = $2 } /^MemAvailable:/ { a = $2 } END { print t - a }' /proc/meminfo; }
sync; echo 3 >/proc/sys/vm/drop_caches
used0=$(used)
rss0=$(kib "$TPID" VmRSS) lck0=$(kib "$TPID" VmLck)
by_mapping "$TPID" >"$W/maps0"
echo "rdmablk-rdma: before: VmRSS $rss0 KiB, VmLck $lck0 KiB"
arena | sed 's/^/rdmablk-rdma:   /'

hold=$((120 + N))
"$IDLE" "rdma://$IP:$PORT/$NQN?io_queues=1&queue_size=128&buffer_pool_bytes=1048576$KATO" "$hold" "$N" >"$W/host.out" 2>&1 &
HPID=$!
if [ -n "${MONITOR:-}" ]; then
  # Every 5 s: both processes' descriptors, mappings, threads and resident memory, and the
  # VM's available memory (how the host's own buffer pools were found filling the VM).
  while sleep 5; do
    line=$(date +%T)
    for p in "$TPID" "$HPID"; do
      [ -d "/proc/$p" ] || continue
      line="$line | $(cat "/proc/$p/comm") fds $(find "/proc/$p/fd" -mindepth 1 | wc -l)"
      line="$line maps $(wc -l <"/proc/$p/maps") threads $(find "/proc/$p/task" -mindepth 1 -maxdepth 1 | wc -l)"
      line="$line rss $(kib "$p" VmRSS)"
    done
    echo "rdmablk-rdma: monitor $line | MemAvailable $(awk '/MemAvailable/ { print $2 }' /proc/meminfo)"
  done &
  MPID=$!
fi
for _ in $(seq 1 $((10 * hold))); do
  grep -q '^connected' "$W/host.out" && break
  kill -0 "$HPID" 2>/dev/null || break
  sleep 0.1
done
if grep -q '^connected' "$W/host.out"; then
  took=$N
  grep '^connected' "$W/host.out" | sed 's/^/rdmablk-rdma: /'
else
  # Refused part-way: "FAIL: connect of controller K of N: why" (K - 1 were connected).
  k=$(sed -n 's/^FAIL: connect of controller \([0-9]*\) of.*/\1/p' "$W/host.out")
  [ -n "$k" ] || fail "the host did not connect: $(tail -2 "$W/host.out" | tr '\n' ' ')"
  took=$((k - 1))
  echo "rdmablk-rdma: the target took $took of $N controllers: $(tail -1 "$W/host.out")"
  echo "rdmablk-rdma: the target's last words: $(grep -iE 'arena|refus|reject' "$W/target.log" | tail -2 | tr '\n' ' ')"
  # Where each of its threads is (a refusal by silence, not by a reject, shows here).
  for t in /proc/"$TPID"/task/*; do
    echo "rdmablk-rdma:   thread $(cat "$t/comm"): $(cat "$t/wchan" 2>/dev/null)," \
      "$(awk '{ print "state", $3, "utime", $14, "stime", $15 }' "$t/stat")"
    [ -n "${STACKS:-}" ] && sed 's/^/rdmablk-rdma:     /' "$t/stack" 2>/dev/null
  done
fi
sleep 5
sync; echo 3 >/proc/sys/vm/drop_caches
used1=$(used)
host=$(kib "$HPID" VmRSS 2>/dev/null)
rss1=$(kib "$TPID" VmRSS) lck1=$(kib "$TPID" VmLck)
by_mapping "$TPID" >"$W/maps1"
when="with the controllers"
[ "$took" = "$N" ] || when="after the refused host left"
echo "rdmablk-rdma: $when: VmRSS $rss1 KiB, VmLck $lck1 KiB"
arena | sed 's/^/rdmablk-rdma:   /'
if [ "$took" = "$N" ]; then
  echo "rdmablk-rdma: $N controllers (admin + one 128-deep I/O queue each):" \
    "resident +$(( (rss1 - rss0) / N )) KiB per controller, pinned +$((lck1 - lck0)) KiB in all"
  # Where the resident growth lies: per mapping name, what moved by 1 KiB or more per controller
  # (rxe maps each queue pair's and completion queue's rings from /dev/infiniband/uverbs*).
  join -a 1 -a 2 -e 0 -o 0,1.2,2.2 "$W/maps0" "$W/maps1" |
    awk -v n="$N" '{ d = $3 - $2; if (d >= n || -d >= n) printf "rdmablk-rdma:   resident in %s: %+d KiB (%+.1f KiB per controller)\n", $1, d, d / n }'
  # As tests/vm/idle-controllers-nvmet.sh counts nvmet: the VM's memory in use, less the two
  # processes' own resident growth (both sides' rxe queues are the kernel's).
  kernel=$((used1 - used0 - ${host:-0} - (rss1 - rss0)))
  echo "rdmablk-rdma: the kernel (rxe queues and CQs of both sides): +$kernel KiB," \
    "$((kernel / N)) KiB per controller; the host process $host KiB"
  # A new host while they are all connected.
  if "$IDLE" "rdma://$IP:$PORT/$NQN?io_queues=1&queue_size=128&buffer_pool_bytes=1048576$KATO" 1 1 >"$W/new.out" 2>&1 &&
    grep -q PASS "$W/new.out"; then
    echo "rdmablk-rdma: a new host's controller connected and read block 0"
  else
    echo "rdmablk-rdma: a new host was NOT served: $(tail -2 "$W/new.out" | tr '\n' ' ')"
  fi
fi
kill "$HPID" 2>/dev/null; wait "$HPID" 2>/dev/null; HPID=
echo PASS
