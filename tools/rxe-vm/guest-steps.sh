#!/usr/bin/env bash
# guest-steps.sh - runs INSIDE the rxe VM (started by tools/test-rxe): every verbs check of
# the run, in one VM start. Each step's output goes to the terminal and to $OUT/<step>.log;
# its result is a line "<step> <rc> <seconds> <detail>" in $OUT/results.
#
# Env (from tools/test-rxe): OUT, ROOT (the checkout), LIBTEST (rdmablk lib test binary),
# E2E_TARGET / E2E_INITIATOR (end-to-end test binaries), CONFORMANCE (binary or empty),
# RXE_ADDR (10.0.2.15), STEP_TIMEOUT (seconds per step).
set -u
: "${OUT:?}" "${ROOT:?}" "${LIBTEST:?}" "${E2E_TARGET:?}" "${E2E_INITIATOR:?}" "${LIFECYCLE:?}" "${RXE_ADDR:?}"
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
: > "$OUT/results"

# run_step NAME CMD...: runs CMD with a timeout, logs it, records rc and duration.
run_step() {
  local name=$1; shift
  echo "=== rxe step: $name: $*"
  local t0 t1 rc
  t0=$(date +%s)
  timeout -k 5 "$STEP_TIMEOUT" "$@" 2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  t1=$(date +%s)
  echo "$name $rc $((t1 - t0))" >> "$OUT/results"
  echo "=== rxe step: $name: rc=$rc ($((t1 - t0)) s)"
}

run_step devinfo ibv_devinfo -d rxe0
grep -q PORT_ACTIVE "$OUT/devinfo.log" || echo "devinfo 1 0 port-not-active" >> "$OUT/results"

# The provider's own tests; RDMABLK_REQUIRE_RDMA turns "skip: no device" into a failure.
RDMABLK_REQUIRE_RDMA=1 RDMABLK_TEST_ADDR=$RXE_ADDR RUST_BACKTRACE=1 \
  run_step verbs-tests "$LIBTEST" fabric::verbs --test-threads=1

if [ -n "${CONFORMANCE:-}" ]; then
  run_step conformance "$CONFORMANCE" --provider verbs --addr "$RXE_ADDR"
fi

# The end-to-end suites, on verbs instead of their default soft provider.
export RDMABLK_E2E_PROVIDER=verbs RDMABLK_E2E_ADDR=$RXE_ADDR
# Warnings of the in-process target and initiator (keep-alive teardowns, failed work requests)
# go to the test's captured output, which libtest prints only for a failing test.
[ -n "${RUST_LOG:-}" ] || { export RUST_LOG=warn; OWN_RUST_LOG=1; }
run_step e2e-target "$E2E_TARGET" --test-threads=1
run_step e2e-initiator "$E2E_INITIATOR" --test-threads=1
run_step lifecycle "$LIFECYCLE" repeated_abort host_process_killed abort_with_backend \
  --test-threads=1
run_step stalled-hosts "$STALLED" --test-threads=1
run_step rdma-srq "$RDMA_SRQ" --test-threads=1
# The RBD case needs a Ceph cluster, which runs on the host side only.
run_step initiator-multipath "$MULTIPATH" --test-threads=1 --skip rbd
unset RDMABLK_E2E_PROVIDER RDMABLK_E2E_ADDR
[ -z "${OWN_RUST_LOG:-}" ] || unset RUST_LOG

# Interop with the Linux kernel's own NVMe-oF host and target.
# The Linux host's whole walk (file system, resets, a target restart) takes minutes under TCG.
RXE_VM_IP=$RXE_ADDR STEP_TIMEOUT=1200 run_step linux-host bash "$ROOT/tests/vm/linux-host.sh"
# The same walk over NVMe/TCP (nvme-tcp against rdmablk-target's tcp listener).
TRTYPE=tcp RXE_VM_IP=$RXE_ADDR STEP_TIMEOUT=1200 run_step linux-host-tcp \
  bash "$ROOT/tests/vm/linux-host.sh"
RXE_VM_IP=$RXE_ADDR run_step multipath bash "$ROOT/tests/vm/multipath.sh"
RXE_VM_IP=$RXE_ADDR run_step visibility bash "$ROOT/tests/vm/visibility.sh"
RXE_VM_IP=$RXE_ADDR run_step reservations bash "$ROOT/tests/vm/reservations.sh"
NVMET_IP=$RXE_ADDR run_step nvmet-interop bash "$ROOT/tests/vm/nvmet-interop.sh"
# rdmablk-initiator over tcp:// against the kernel's nvmet-tcp.
NVMET_TRTYPE=tcp NVMET_IP=$RXE_ADDR run_step nvmet-interop-tcp bash "$ROOT/tests/vm/nvmet-interop.sh"
# The Debian packages (tools/package built them): install, run from the installed config
# with the Linux host, the C API and fio connecting, purge.
if [ "${RXE_NO_PACKAGES:-0}" != 1 ]; then
  RXE_VM_IP=$RXE_ADDR STEP_TIMEOUT=600 run_step packages bash "$ROOT/tests/vm/packages.sh"
fi
# The Linux host against an RBD namespace, Ceph (tools/ceph-dev) inside this VM.
RXE_VM_IP=$RXE_ADDR STEP_TIMEOUT=900 run_step rbd-linux-host bash "$ROOT/tests/vm/rbd-linux-host.sh"
# The nvme backend on the emulated NVMe drive (tools/test-rxe attaches it): polled over
# NVMe/TCP, interrupts over RDMA; the step unbinds the drive again when it is done.
RXE_VM_IP=$RXE_ADDR run_step nvme-backend bash "$ROOT/tests/vm/nvme-backend.sh"
# Whole-VM stalls of 2 s (the host side SIGSTOPs qemu: tools/rxe-vm/stall-watcher.sh, which
# tools/test-rxe runs beside this VM) under the Linux host's default keep-alive.
RXE_VM_IP=$RXE_ADDR STALL_DIR=$OUT run_step keepalive-stall bash "$ROOT/tests/vm/keepalive-stall.sh"
exit 0
