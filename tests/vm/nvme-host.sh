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
