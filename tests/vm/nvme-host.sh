# shellcheck shell=bash
# tests/vm/nvme-host.sh - how every VM script has the Linux host (nvme-cli) reach a target: one
# transport for the whole run, named once. Source it after setting IP (the target's address).
#
#   TRTYPE   the NVMe-oF transport: rdma (default; Soft-RoCE rxe0 in the VM)
#
# nvme_connect ARGS...      nvme connect     -t $TRTYPE -a $IP ARGS...  (give -s, -n, options)
# nvme_discover ARGS...     nvme discover    -t $TRTYPE -a $IP ARGS...
# nvme_connect_all ARGS...  nvme connect-all -t $TRTYPE -a $IP ARGS...
# They are functions: under `timeout`, write `timeout N nvme connect -t "$TRTYPE" -a "$IP" ...`.
TRTYPE=${TRTYPE:-rdma}
nvme_connect() { nvme connect -t "$TRTYPE" -a "$IP" "$@"; }
nvme_discover() { nvme discover -t "$TRTYPE" -a "$IP" "$@"; }
nvme_connect_all() { nvme connect-all -t "$TRTYPE" -a "$IP" "$@"; }

# one_head NQN NCTRL NNS: the host joined NQN's controllers under ONE nvme subsystem: exactly
# one /sys/class/nvme-subsystem entry for NQN, holding all NCTRL controllers of NQN, each with
# a multipath path (nvmeXcYnZ) to each of the NNS namespaces, and one head block device
# (nvmeXnZ) per namespace in it, NNS with distinct NSIDs, and no other block device of NQN.
# Polls up to 10 s (a new controller scans its namespaces in the background). Sets
# ONE_HEAD_SUBSYS to the subsystem's sysfs directory; needs say(), fail() and STEP.
one_head() {
  local why s subs c ctrls all p paths h heads nsids
  for _ in $(seq 1 100); do
    why='' subs=() ctrls=0 all=0 heads=0 nsids=''
    for s in /sys/class/nvme-subsystem/nvme-subsys*; do
      [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] && subs+=("$s")
    done
    if [ ${#subs[@]} != 1 ]; then
      why="${#subs[@]} nvme subsystems for $1, want 1"
    else
      for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        all=$((all + 1))
        [ -e "${subs[0]}/${c##*/}" ] && ctrls=$((ctrls + 1))
        paths=0
        for p in "$c"/nvme*c*n*; do [ -e "$p" ] && paths=$((paths + 1)); done
        [ "$paths" = "$3" ] || why="$why ${c##*/} has $paths multipath paths, want $3;"
      done
      [ "$ctrls" = "$2" ] && [ "$all" = "$2" ] ||
        why="$why $all controllers of $1, $ctrls of them under ${subs[0]##*/}, want $2 under it;"
      for h in "${subs[0]}"/nvme*n*; do
        [[ ${h##*/} =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
        heads=$((heads + 1)); nsids="$nsids$(cat "$h/nsid" 2>/dev/null)"$'\n'
      done
      [ "$heads" = "$3" ] && [ "$(printf '%s' "$nsids" | sort -u | grep -c .)" = "$3" ] ||
        why="$why ${subs[0]##*/} has $heads heads (NSIDs $(printf '%s' "$nsids" | paste -sd,)), want $3;"
      for h in /sys/block/nvme*n*; do
        [[ ${h##*/} =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
        [ "$(cat "$h/device/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        [ -e "${subs[0]}/${h##*/}" ] || why="$why ${h##*/} is a block device of $1 outside its head;"
      done
    fi
    [ -z "$why" ] && {
      ONE_HEAD_SUBSYS=${subs[0]}
      say "one head: ${subs[0]##*/} with $ctrls controllers, $heads namespace heads"
      return 0
    }
    sleep 0.1
  done
  fail "$STEP: not one multipath head: ${why# }"
}
