# tests/vm/lib.sh - what the VM scripts that drive the Linux host against rdmablk-target share.
# Source it after defining say() and fail() (each script prints and cleans up its own way) and
# setting BIN (the target binary), WORK (a scratch directory holding target.toml), IP, PORT,
# NQN (and TRTYPE for connect_as). Sets TPID. perf_ok needs none of them.

# start_target: starts $BIN on $WORK/target.toml (log appended to $WORK/target.log) and waits
# up to 60 s for its `ready` line (printed once every listener, the control socket and the
# metrics endpoint accept; the `listening ADDR` lines before it name the listeners).
start_target() {
  : >"$WORK/target.out"
  say "starting $BIN on $IP:$PORT"
  RUST_LOG=${RUST_LOG:-info} "$BIN" --config "$WORK/target.toml" >"$WORK/target.out" \
    2>>"$WORK/target.log" &
  TPID=$!
  for _ in $(seq 1 600); do
    grep -q '^ready$' "$WORK/target.out" 2>/dev/null && break
    kill -0 "$TPID" 2>/dev/null || fail "target exited at start"
    sleep 0.1
  done
  grep -q '^ready$' "$WORK/target.out" || fail "target did not print ready within 60 s"
  say "$(cat "$WORK/target.out")"
}

# small_target_toml: the [target], [arena] and [limits] sections of a small rdmablk-target
# (one worker, interrupt mode, 96 MiB arena, QD32, 128 KiB I/O, 3 queues per controller), for
# a script's target.toml between its listeners and subsystems.
small_target_toml() {
  cat <<'TOML'
[target]
worker_threads = 1
poll_mode = "interrupt"

[arena]
bytes = "96MiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = 131072
max_queues_per_controller = 3
max_connections = 16
TOML
}

# ns_dev [NSID]: the block device of namespace NSID (default 1) of $NQN (waits up to 10 s).
ns_dev() {
  local b d
  for _ in $(seq 1 100); do
    for b in /sys/block/nvme*n*; do
      [ -e "$b" ] || continue
      [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
      [ "$(cat "$b/nsid" 2>/dev/null)" = "${1:-1}" ] || continue
      d=/dev/$(basename "$b"); [ -b "$d" ] && { echo "$d"; return 0; }
    done
    sleep 0.1
  done
  return 1
}

# ctrl_of NQN: the character device of a live controller of NQN (/dev/nvmeX). With native
# multipath (the namespaces are shared), the block devices hang off the subsystem, not off a
# controller, so the controller is found through /sys/class/nvme.
ctrl_of() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    [ "$(cat "$c/state" 2>/dev/null)" = live ] || continue
    echo "/dev/$(basename "$c")"; return 0
  done
  return 1
}

# connect_as HOSTNQN HOSTID: connects $NQN at $IP:$PORT over $TRTYPE as that host, through
# /dev/nvme-fabrics, the kernel's own interface (nvme-cli 2.3 refuses a second connection to
# the same subsystem and address as "already connected", even for another host NQN).
connect_as() {
  printf 'transport=%s,traddr=%s,trsvcid=%s,nqn=%s,hostnqn=%s,hostid=%s' "$TRTYPE" "$IP" \
    "$PORT" "$NQN" "$1" "$2" >/dev/nvme-fabrics 2>"$WORK/connect.err" ||
    fail "${STEP:-connect}: connect as $1: $(cat "$WORK/connect.err")"
}

# ctrl_of_host HOSTNQN: the controller (nvmeX) of $NQN that HOSTNQN connected.
ctrl_of_host() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    [ "$(cat "$c/hostnqn" 2>/dev/null)" = "$1" ] || continue
    echo "${c##*/}"; return 0
  done
  return 1
}

# perf_ok REPORT: rdmablk-perf's JSON report shows I/O done, no failed I/O and no verify failure.
perf_ok() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = d["total"]
ios = t["read"]["total_ios"] + t["write"]["total_ios"]
v = t.get("verify") or {}
print(f"rdmablk-perf: {ios} I/Os, {t['error']} failed, {v.get('blocks_checked', 0)} blocks checked, "
      f"{v.get('failures', 0)} verify failures, exit code {d['exit_code']}")
sys.exit(0 if ios > 0 and t["error"] == 0 and v.get("failures", 0) == 0
         and v.get("blocks_checked", 0) > 0 and d["exit_code"] == 0 else 1)
PY
}
