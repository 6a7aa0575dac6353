# shellcheck shell=bash
# tools/lib/ci-knobs.sh: every environment variable ("knob") that tools/test and what it runs
# read (its scripts, the VM scripts, which see the caller's whole exported environment through
# tools/rxe-vm/run-in-vm.sh, and the Rust tests), with what each may do to a CI run.
#
#   rdmablk_ci_refuse_knobs PROG   with CI=true (or 1): exit 2, before anything runs, if a
#                                  knob that removes or weakens a step is set (one line each:
#                                  PROG: CI=true refuses NAME=VALUE (why): unset it)
#   rdmablk_ci_knobs_audit         lists each variable the scripts or the Rust code read from
#                                  the environment that the list below lacks; returns 1 if any
#   tools/lib/ci-knobs.sh --audit  the same, as a command
#
# CI (.ci/run) runs tools/test with CI=true in a clean environment, where none of these is set,
# so the check passes there; it is for a CI job (or a person) that exports one by accident.

# The list, one knob a line: NAME RULE what reads it and what it does. RULE:
#   refuse     refused when set (not empty): it skips or shortens a step, loosens its pass
#              rule, or makes it test something other than this checkout (other binaries,
#              another copy of a test suite, a lying target)
#   below=N    refused unless a whole number >= N (the default): fewer shortens the step
#   is=V       refused when it is V (the value that loosens a pass rule)
#   allow      harmless: a path, an address, a label, a timeout (a shorter one can only make
#              a step fail), a stricter setting, or plumbing its caller sets on every call
#
# ADDING A KNOB: a script or a test that reads a new variable from the environment adds a line
# here (tools/test's audit step fails until it does): `refuse`, `below=` or `is=` if some value
# of it skips, shortens or loosens anything tools/test runs, else `allow` with the reason. The
# audit finds reads written as ${NAME:-...} (also :=, :?, :+, -, =, ?, +), os.environ/getenv
# in embedded Python, and std::env::var/var_os("NAME") (or a const naming it) in Rust;
# read a knob one of those ways, not as a bare $NAME.
rdmablk_ci_knob_list() {
  cat <<'KNOBS'
# --- tools/test
CI                          allow     this check's own switch
RDMABLK_SKIP_RXE            refuse    tools/test: skips tools/test-rxe, every real-verbs step
RDMABLK_FUZZ_SECONDS        below=20  tools/test: seconds per fuzz target; fewer shortens the smoke
# --- tools/soak (tools/test runs it once per transport)
SOAK_TRANSPORT              allow     tools/soak: soft or tcp; tools/test sets it for each of its two runs
SOAK_FAULTS                 refuse    tools/soak: the fault kinds dealt; fewer kinds skip faults
SOAK_MIN_IOS_PER_MIN        below=1000 tools/soak: the verified I/Os a connection must do per minute
SOAK_BIN                    refuse    tools/soak: binaries from elsewhere, and no build
RDMABLK_SKIP_BUILD          refuse    tools/soak, tools/check-monitoring: binaries as they are (stale)
# --- tools/spdk-interop
SPDK_DIR                    allow     tools/spdk-interop: a built SPDK tree (the peer, not rdmablk; its checks all run)
SPDK_INTEROP_CPUS           allow     tools/spdk-interop: the CPUs the target and the SPDK host run on
# --- tools/check-monitoring
CHECK_MONITORING_STRICT     is=0      tools/check-monitoring: 0 turns a histogram that is not one into a warning
CHECK_MONITORING_BIN        refuse    tools/check-monitoring: binaries from elsewhere, and no build
# --- tools/fuzz-smoke
RDMABLK_FUZZ_RUNS           refuse    tools/fuzz-smoke: stops each target after this many runs
RDMABLK_FUZZ_TARGETS        refuse    tools/fuzz-smoke: only these targets
RDMABLK_FUZZ_SCRATCH        allow     tools/fuzz-smoke: a corpus directory kept and grown (more inputs, not fewer)
RDMABLK_FUZZ_LOGS           allow     tools/fuzz-smoke: where the logs go
# --- tools/rxe-vm/trixie-root.sh (and tools/test-tls-linux, which tools/test does not run)
RDMABLK_PEERS_DIR           allow     trixie-root.sh, test-tls-linux: where the Debian 13 root and the VMs' kernels are cached
# --- tools/test-rxe
RXE_NO_CONFORMANCE          refuse    tools/test-rxe: skips the conformance suite on rxe
RXE_NO_PACKAGES             refuse    tools/test-rxe, guest-steps.sh: skips the Debian packages step
RXE_NO_AUTH                 refuse    tools/test-rxe: skips the 6.12 VM start (auth, ktls, the tcp-6.12 steps)
RXE_NO_MANY_QUEUES          refuse    tools/test-rxe: skips the 32-vCPU VM start (the Linux host's 32 queues on a default target)
RXE_TCP_WALKS_6_12          allow     tools/test-rxe: 1 adds the NVMe/TCP walk and nvmet-tcp interop on 6.12 (more steps, none fewer)
RXE_FULL                    allow     tools/test-rxe: 1 adds what tools/test leaves out for time (nvmet's blktests runs, multipath-6.12, the 6.12 TCP walks, the full auth matrix): more steps, none fewer
RXE_NO_BLKTESTS             refuse    tools/test-rxe: skips blktests' quick set (rdma and tcp)
RXE_NO_POWERCUT             refuse    tools/test-rxe: skips the power cuts and their negative control
RXE_SKIP_BUILD              refuse    tools/test-rxe, tools/powercut, tools/blktests: test binaries and packages as they are (stale)
RXE_AUTH_MATRIX             allow     tools/test-rxe: subset (default) or anything else, which runs all 18 combinations
RXE_AUTH_KPKG               allow     tools/test-rxe: the 6.12 start's kernel package; its kernel line still must be 6.12
RXE_BLKTESTS_TIMEOUT        allow     tools/test-rxe: the blktests VM's timeout
# --- tools/rxe-vm/run-in-vm.sh (every VM start) and tools/rxe-vm/*.sh
RXE_VM_DIR                  allow     run-in-vm.sh: where kernels and initramfs are cached
RXE_VM_KPKG                 allow     run-in-vm.sh: the kernel package; test-rxe checks each start's kernel
RXE_VM_KDEB                 allow     run-in-vm.sh: a local .deb, which must be the requested package
RXE_VM_KREL                 allow     run-in-vm.sh: the file each start's uname -r goes to (callers set it)
RXE_VM_TIMEOUT              allow     run-in-vm.sh: the VM's timeout
RXE_VM_MEM                  allow     run-in-vm.sh: the VM's memory
RXE_VM_SMP                  allow     run-in-vm.sh: the VM's CPUs
RXE_VM_IP                   allow     run-in-vm.sh, tests/vm: rxe0's address
RXE_VM_MTU                  allow     run-in-vm.sh: eth0's MTU
RXE_VM_MODULES              allow     run-in-vm.sh: more modules to load
RXE_VM_RW                   allow     run-in-vm.sh: more writable directories
RXE_VM_VERBOSE              allow     run-in-vm.sh: console and timings
RXE_VM_KEEP                 allow     run-in-vm.sh: keeps the per-run directory
RXE_VM_DISK                 allow     run-in-vm.sh: virtio disks to attach (powercut, blktests set theirs)
RXE_VM_DISK_CACHE           allow     run-in-vm.sh: qemu's cache mode for them (powercut sets its own)
RXE_VM_NVME                 allow     run-in-vm.sh: emulated NVMe drives to attach (test-rxe, powercut set theirs)
RXE_VM_PIDFILE              allow     run-in-vm.sh: where qemu writes its pid (callers set it)
RXE_VM_APPEND               allow     run-in-vm.sh: more kernel command line
RXE_VM_ROOT                 refuse    run-in-vm.sh: the guest's root file system instead of this machine's (other peer tools; tools/test-tls-linux sets its own)
STEP_TIMEOUT                allow     guest-steps.sh: a step's timeout
STALL_DIR                   allow     tests/vm/keepalive-stall.sh: set by guest-steps.sh
PHASE_TIMEOUT               allow     tools/blktests, blktests-guest.sh: a phase's timeout
TEST_STALL                  allow     blktests-guest.sh: seconds without output before a test counts as stalled (failed)
NVMET_BLKDEV_TYPES          allow     blktests-guest.sh: nvmet's backing device type (the reference side)
# plumbing: set by the script that starts the reader, on every call
OUT                         allow     guest-steps.sh, blktests-guest.sh, powercut.sh, tools/blktests: set by their callers
ROOT                        allow     guest-steps.sh, blktests-guest.sh, powercut.sh: set by their callers
LIBTEST                     allow     guest-steps.sh, tests/vm/ktls.sh: set by tools/test-rxe
E2E_TARGET                  allow     guest-steps.sh: set by tools/test-rxe
E2E_INITIATOR               allow     guest-steps.sh: set by tools/test-rxe
LIFECYCLE                   allow     guest-steps.sh: set by tools/test-rxe
CONFORMANCE                 allow     guest-steps.sh: set by tools/test-rxe
RXE_ADDR                    allow     guest-steps.sh, blktests-guest.sh, powercut.sh: set by their callers
BT                          allow     blktests-guest.sh: set by tools/blktests
TARGETS                     allow     blktests-guest.sh: set by tools/blktests
TESTS                       allow     blktests-guest.sh: set by tools/blktests
KCONFIG                     allow     blktests-guest.sh: set by tools/blktests
TRIAL                       allow     tests/vm/powercut.sh: set by tools/powercut
MODE                        allow     tests/vm/powercut.sh: set by tools/powercut
PREV_MODE                   allow     tests/vm/powercut.sh: set by tools/powercut
SEED                        allow     tests/vm/powercut.sh: set by tools/powercut
BIN                         allow     tests/vm/powercut.sh: set by tools/powercut
STEP                        allow     tests/vm: the step name a failure line names
DEV                         allow     tests/vm/multipath.sh: its own, assigned before the read
# --- tools/powercut
POWERCUT_MODES              refuse    tools/powercut: the backends cut in turn; fewer skip backends
POWERCUT_BIN                refuse    tools/powercut: binaries from elsewhere
POWERCUT_NEGATIVE_CONTROL   allow     tools/powercut: tools/test-rxe sets it for both its runs
POWERCUT_OUT                allow     tools/powercut: where its output goes
RDMABLK_TEST_IGNORE_FUA_AND_FLUSH refuse a debug target ignores FUA and Flush (the negative control sets it itself)
# --- tools/blktests and tools/blktests-target-control
BLKTESTS_SRC                refuse    tools/blktests, tests/vm/reservations.sh: another copy of blktests (its tests, 054.out)
BLKTESTS_OUT                allow     tools/blktests: where its output goes
NVME_IMG_SIZE               allow     tools/blktests: the namespace size; the quick set must still pass 5 of 5
BLKTESTS_IMG_DIR            allow     blktests-target-control: set by blktests-guest.sh
RDMABLK_CTL_SOCKET          allow     blktests-target-control: set by blktests-guest.sh
RDMABLK_BLKTESTS_TRADDR     allow     blktests-target-control: set by blktests-guest.sh
RDMABLK_BLKTESTS_TRSVCID    allow     blktests-target-control: the listener's port
RDMABLK_BLKTESTS_TRTYPE     allow     blktests-target-control: set by blktests-guest.sh
RDMABLK_BLKTESTS_PROVIDER   allow     blktests-target-control: set by blktests-guest.sh
RDMABLK_BLKTESTS_LOG        allow     blktests-target-control: set by blktests-guest.sh
RDMABLK_BLKTESTS_BACKEND    allow     blktests-target-control: file or block, both real backends
RDMABLK_BLKTESTS_BLOCK_SIZE allow     blktests-target-control: the namespace's block size
RDMABLK_BLKTESTS_PORT       allow     blktests-target-control: 0 leaves the listener alone (nvme/061, not in the quick set)
# --- tests/vm (the VM steps see the caller's exported environment)
CONTROLLERS                 allow     tests/vm/idle-controllers-nvmet.sh, idle-controllers-rdma.sh: set by tools/bench/idle-controllers (a benchmark, not a step)
TARGET_BIN                  allow     tests/vm/idle-controllers-rdma.sh: another build's rdmablk-target to measure (a benchmark, not a step)
CTL_BIN                     allow     tests/vm/idle-controllers-rdma.sh: that build's rdmablk-ctl (a benchmark, not a step)
KEEP_LOG                    allow     tests/vm/idle-controllers-rdma.sh: where to keep the target's log (a benchmark, not a step)
KATO_MS                     allow     tests/vm/idle-controllers-rdma.sh: the idle host's keep-alive timeout (a benchmark, not a step)
MONITOR                     allow     tests/vm/idle-controllers-rdma.sh: 1 prints both processes' descriptors, mappings, threads and memory every 5 s (a benchmark, not a step)
STACKS                      allow     tests/vm/idle-controllers-rdma.sh: 1 also prints the kernel stack of each target thread when a host is refused
TRTYPE                      refuse    tests/vm/nvme-host.sh: the transport of the steps test-rxe runs over RDMA
NVMET_TRTYPE                refuse    tests/vm/nvmet-interop.sh: the transport of the nvmet-interop step (RDMA); idle-controllers-nvmet.sh (a benchmark): tcp or rdma
RDMABLK_TARGET              refuse    tests/vm: another rdmablk-target binary
RDMABLK_CTL                 refuse    tests/vm, blktests-target-control: another rdmablk-ctl binary
VERIFY_BIN                  refuse    tests/vm: another verify example binary
IDLE_BIN                    refuse    tests/vm/nvmet-interop.sh: another idle example binary
PERF_BIN                    refuse    tests/vm: another rdmablk-perf binary
PKGDIR                      refuse    tests/vm/packages.sh: other .deb files than tools/package built
RESV_TARGET                 refuse    tests/vm/reservations.sh: nvmet runs the walk instead of rdmablk-target
AUTH_MATRIX_ONLY            refuse    tests/vm/auth-matrix.sh: only these hash/group combinations
AUTH_MATRIX                 allow     tests/vm/auth-matrix.sh: set by tools/test-rxe
AUTH_CONNECT_TIMEOUT        allow     tests/vm/auth-matrix.sh: one connect's timeout
FIO_RUNTIME                 below=8   tests/vm/linux-host.sh (5 s), rbd-linux-host.sh (8 s): fio's seconds
FIO_SIZE                    refuse    tests/vm/linux-host.sh, multipath.sh, rbd-linux-host.sh, many-queues.sh: fio's size; less verifies less
STALL_SECS                  below=2   tests/vm/keepalive-stall.sh: how long each whole-VM stall lasts
NVMET_NS_MB                 below=64  tests/vm/nvmet-interop.sh: nvmet's namespace size
BLOCKS                      below=1024 tests/vm/powercut.sh: the blocks the power-cut writer spreads over
PORT                        allow     tests/vm: the target's port
NVMET_IP                    allow     tests/vm/nvmet-interop.sh: set by guest-steps.sh
NVMET_PORT                  allow     tests/vm/nvmet-interop.sh: nvmet's port
NVMET_NQN                   allow     tests/vm/nvmet-interop.sh: nvmet's subsystem name
RUST_LOG                    allow     scripts and tests: log level
# --- tools/ceph-dev, tools/lib/install-deps.sh
RDMABLK_CEPH_DIR            allow     tools/ceph-dev: the cluster's directory
RDMABLK_CEPH_PORT           allow     tools/ceph-dev: the monitor's port
RDMABLK_CEPH_IMAGE_SIZE     allow     tools/ceph-dev: the test image's size
RDMABLK_CEPH_MEM            allow     tools/ceph-dev: the OSD's memory target
RDMABLK_APT_UPDATED         allow     install-deps.sh: skips apt-get update (a missing package still fails)
# --- Rust tests and crates (cargo test in tools/test, the test binaries in the VM)
MIN_QUEUES                  refuse    tests/vm/many-queues.sh: fewer I/O queues than the host's CPUs accepted
RDMABLK_SCALE_CONTROLLERS   refuse    target tests (tcp_scale.rs): fewer controllers than the 1,000 the test asserts on
RDMABLK_E2E_TRANSPORT       refuse    target tests: loop or tcp instead of RDMA (RDMA-only cases then skip)
RDMABLK_E2E_TCP_DIGESTS     allow     target tests over NVMe/TCP: 1 turns header and data digests on (stricter); tools/test sets it for its TCP conformance pass
RDMABLK_E2E_PROVIDER        refuse    testkit, initiator tests: another provider than soft (the VM sets verbs itself)
RDMABLK_SOFT_MAX_CQE        refuse    soft provider: smaller CQs than its 4 Mi entries (rdma_cqs.rs sets it in its own process)
RDMABLK_E2E_ADDR            allow     testkit, initiator tests: the address (the VM sets it)
RDMABLK_REQUIRE_RDMA        allow     verbs tests: 1 fails instead of skipping without a device (stricter)
RDMABLK_TEST_ADDR           allow     verbs smoke tests: the device's address (the VM sets it)
RDMABLK_TEST_VERBS_ADDR     allow     conformance_verbs (ignored, not run by tools/test): the device's address
RDMABLK_TEST_VERBS_MAY_SKIP refuse    conformance_verbs (ignored today): lets cases skip
RDMABLK_BLESS               refuse    initiator-c/tests/header.rs: rewrites rdmablk.h instead of comparing it
RDMABLK_TEST_EXIT_WORKER    allow     a debug target's worker exits at start: every target then fails (target/tests/daemon.rs sets it)
RDMABLK_TEST_BLOCKDEV       allow     target backend tests: adds a test on this block device
RDMABLK_TEST_BLOCKDEV_POLL  allow     target backend tests: that test polls
RDMABLK_KEEP_TEST_DIR       allow     target/tests/shutdown.rs: keeps its directory
RDMABLK_TARGET_LOG          allow     target process tests: the target's log level
RDMABLK_CRASH_SOAK_TRIALS   allow     crash_soak (ignored; tools/crash-soak): its trials
RDMABLK_CRASH_SOAK_SEED     allow     crash_soak (ignored; tools/crash-soak): its seed
RDMABLK_SOFT_TEST_PEER      allow     soft lifecycle test: set for the child process it starts
RDMABLK_LIFECYCLE_CHILD_TARGET allow  target lifecycle test: set for the child process it starts
RDMABLK_C_SONAME            allow     initiator-c/build.rs: the C library's soname
NOTIFY_SOCKET               allow     rdmablk-target: systemd's readiness socket
OUT_DIR                     allow     build scripts: cargo sets it
PATH                        allow     initiator-c tests: where the C compiler is
KNOBS
}

# rdmablk_ci_refuse_knobs PROG: with CI=true (or CI=1), exits 2 if any knob the list refuses is
# set, printing one line per knob; otherwise returns 0.
rdmablk_ci_refuse_knobs() {
  case ${CI:-} in true | 1) ;; *) return 0 ;; esac
  local prog=$1 name rule why val bad fix refused=0
  while read -r name rule why; do
    case $name in '' | '#'*) continue ;; esac
    val=${!name:-}
    [ -n "$val" ] || continue
    bad=0
    case $rule in
      refuse) bad=1 ;;
      below=*) { [[ $val =~ ^[0-9]+$ ]] && [ "$((10#$val))" -ge "${rule#below=}" ]; } || bad=1 ;;
      is=*) [ "$val" = "${rule#is=}" ] && bad=1 ;;
      allow) ;;
      *) echo "$prog: tools/lib/ci-knobs.sh: $name: unknown rule $rule" >&2; exit 2 ;;
    esac
    if [ $bad = 1 ]; then
      fix="unset it"
      [[ $rule == below=* ]] && fix="unset it or give it ${rule#below=} or more"
      printf '%s: CI=%s refuses %s=%q (%s): %s\n' "$prog" "$CI" "$name" "$val" "$why" "$fix" >&2
      refused=1
    fi
  done < <(rdmablk_ci_knob_list)
  [ $refused = 0 ] || exit 2
}

# The files whose environment reads the audit checks: tools/test and every script it names
# (tools/...), and they name, and so on; the VM scripts (started by a path built at run time);
# and every Rust file that calls env::var (git's, or any outside build/ when this is no git
# checkout). A new step's script is found by its name in tools/test.
rdmablk_ci_knob_files() {
  local root=$1
  (
    cd "$root" || exit 1
    local -A seen=()
    local queue=(tools/test) f next
    while [ ${#queue[@]} -gt 0 ]; do
      f=${queue[0]} queue=("${queue[@]:1}")
      [ -z "${seen[$f]:-}" ] || continue
      seen[$f]=1
      echo "$f"
      [ "$f" = tools/lib/ci-knobs.sh ] && continue  # its list names scripts in prose
      for next in $(grep -v '^[[:space:]]*#' "$f" | grep -oE 'tools/[A-Za-z0-9_./-]*[A-Za-z0-9_-]' | sort -u); do
        [ -f "$next" ] || continue
        [[ $next == *.sh ]] || [ "$(head -c 2 "$next")" = '#!' ] && queue+=("$next")
      done
    done
    ls tools/lib/*.sh tools/rxe-vm/*.sh tests/vm/*.sh
    git grep -l -E 'env::var' -- '*.rs' 2>/dev/null ||
      find . -name '*.rs' -not -path './build/*' -not -path './fuzz/target/*' \
        -exec grep -l -E 'env::var' {} + | sed 's|^\./||'
  ) | sort -u
}

# rdmablk_ci_knobs_read ROOT: "NAME FILE" for every variable a file reads from the
# environment. Shell: ${NAME:-...} and the like, unless the file's first mention of NAME
# assigns it (a variable of its own) and never as NAME=${NAME:-...}; Python: os.environ and
# getenv; Rust: std::env::var/var_os with the name, or a const holding it.
rdmablk_ci_knobs_read() {
  local root=$1 f body n first c
  while read -r f; do
    body=$(grep -v '^[[:space:]]*#' "$root/$f" | grep -v '^[[:space:]]*//') || true
    case $f in
      *.rs)
        for n in $(grep -oE 'env::var(_os)?\("[A-Z][A-Z0-9_]*"\)' <<<"$body" | grep -oE '"[A-Z0-9_]+"' | tr -d '"'); do
          echo "$n $f"
        done
        for c in $(grep -oE 'env::var(_os)?\([A-Z][A-Z0-9_]*\)' <<<"$body" | sed -E 's/.*\(//; s/\)$//'); do
          n=$(grep -oE "const $c: &str = \"[A-Z0-9_]+\"" <<<"$body" | grep -oE '"[A-Z0-9_]+"' | tr -d '"') || true
          echo "${n:-$c} $f"
        done
        ;;
      *)
        for n in $(grep -oE 'os\.(environ\.get\(|environ\[|getenv\()"[A-Z][A-Z0-9_]*"' <<<"$body" |
                   grep -oE '"[A-Z0-9_]+"' | tr -d '"'); do
          echo "$n $f"
        done
        for n in $(grep -oE '\$\{[A-Z][A-Z0-9_]*:?[-=?+]' <<<"$body" | sed -E 's/^\$\{//; s/:?[-=?+]$//' | sort -u); do
          if ! grep -qE "(^|[^A-Za-z0-9_])$n=\\\$\\{$n:?[-=?+]" <<<"$body"; then
            first=$(grep -oE "\\\$\\{?$n([^A-Za-z0-9_]|\$)|(^|[^A-Za-z0-9_{\$])$n(\\[[^]]*\\])?\\+?=" <<<"$body" | head -1) || true
            [[ $first == *'$'* ]] || continue
          fi
          echo "$n $f"
        done
        ;;
    esac
  done < <(rdmablk_ci_knob_files "$root")
}

# rdmablk_ci_knobs_audit: prints each variable read from the environment that the list lacks
# (and the files that read it), and each listed one nothing reads any more; returns 1 if there
# is either.
rdmablk_ci_knobs_audit() {
  local root found listed missing stale
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
  found=$(rdmablk_ci_knobs_read "$root" | sort -u)
  listed=$(rdmablk_ci_knob_list | awk '$1 !~ /^#/ && NF { print $1 }' | sort -u)
  missing=$(awk 'NR == FNR { listed[$1] = 1; next }
    !($1 in listed) { files[$1] = files[$1] " " $2 }
    END { for (n in files) print n ":" files[n] }' <(echo "$listed") <(echo "$found") | sort)
  stale=$(comm -13 <(awk '{ print $1 }' <<<"$found" | sort -u) <(echo "$listed") | paste -sd' ')
  [ -z "$missing" ] && [ -z "$stale" ] && return 0
  if [ -n "$missing" ]; then
    echo "tools/lib/ci-knobs.sh: read from the environment but not in its list (add each, saying whether it weakens a step):" >&2
    sed 's/^/  /' <<<"$missing" >&2
  fi
  [ -z "$stale" ] || echo "tools/lib/ci-knobs.sh: listed, but nothing reads them (remove them): $stale" >&2
  return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case ${1:-} in
    --audit) rdmablk_ci_knobs_audit && echo "tools/lib/ci-knobs.sh: every knob read is listed" ;;
    *) echo "usage: tools/lib/ci-knobs.sh --audit (tools/test sources it for the CI check)" >&2; exit 2 ;;
  esac
fi
