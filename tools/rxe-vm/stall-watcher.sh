#!/usr/bin/env bash
# stall-watcher.sh PIDFILE DIR - runs on the HOST beside a VM started with RXE_VM_PIDFILE:
# stalls the whole VM (SIGSTOP of qemu: every vCPU and device stops, and the guest's clock
# jumps when it resumes) when the guest asks for it. A guest script writes
# "SECONDS COUNT" to DIR/stall-request (DIR on a writable share); the watcher stops the VM
# COUNT times for SECONDS each, with 1 s of running between, then renames the request to
# DIR/stall-done. Exits when DIR/stall-quit appears or qemu is gone (after it was seen).
set -u
PIDFILE=${1:?PIDFILE}; DIR=${2:?DIR}
seen=0
while [ ! -e "$DIR/stall-quit" ]; do
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    seen=1
    if [ -f "$DIR/stall-request" ]; then
      read -r secs count < "$DIR/stall-request"
      for _ in $(seq "${count:-1}"); do
        kill -STOP "$pid"; sleep "${secs:-2}"; kill -CONT "$pid"; sleep 1
      done
      echo "stalled ${count:-1} x ${secs:-2} s" > "$DIR/stall-request"
      mv "$DIR/stall-request" "$DIR/stall-done"
    fi
  elif [ $seen = 1 ]; then
    exit 0
  fi
  sleep 0.2
done
