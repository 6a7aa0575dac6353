# shellcheck shell=bash
# Sourced by tools/quickstart, tools/test and the scripts beside them: installs, only where
# missing, what rdmablk needs on a fresh Debian/Ubuntu machine. Needs root or sudo for apt-get.
# Two sets: what building and running the target and rdmablk-perf needs
# (rdmablk_install_quickstart_deps, for tools/quickstart), and everything the tests, the RBD
# backend and the monitoring checks need besides (rdmablk_install_build_deps, for tools/test and
# the scripts that build or test as it does).

rdmablk_sudo() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "rdmablk: need root (or sudo) to run: $*" >&2; return 1; fi
}

# rdmablk_pkg_installed PKG: whether dpkg has PKG installed.
rdmablk_pkg_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

# rdmablk_apt_install PKG...: installs the packages that are not installed yet.
rdmablk_apt_install() {
  local missing=() p
  for p in "$@"; do
    rdmablk_pkg_installed "$p" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "rdmablk: installing ${missing[*]}" >&2
  if [ -z "${RDMABLK_APT_UPDATED:-}" ]; then
    rdmablk_sudo apt-get update -qq >&2 || return 1
    export RDMABLK_APT_UPDATED=1
  fi
  rdmablk_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
}

# What building rdmablk-target, rdmablk-ctl and rdmablk-perf needs, and running them (without
# the RBD backend): the verbs headers and libraries bindgen and the linker need (build.rs), and
# libclang for bindgen; clang, through which bindgen finds the system's include paths; gcc, the
# C compiler of the verbs shim (build.rs) and rustc's linker; libssl-dev (found through
# pkg-config) for NVMe/TCP's TLS (the `openssl` crate links the system's libssl).
RDMABLK_CORE_PKGS=(libibverbs-dev librdmacm-dev libclang-dev clang gcc libssl-dev pkg-config)
# librbd-dev and librados-dev for the target's RBD backend (cargo feature `rbd`, on by default;
# target/build.rs).
RDMABLK_RBD_PKGS=(librbd-dev librados-dev)
# What the tests use besides: pkg-config (the C API's pkg-config file); groff-base, which renders
# the generated manual pages in their tests; tmux, the terminal `rdmablk-ctl top` is tested in;
# make, fio (Debian 12's 3.33) and gcc's ASan for the C API's tests (initiator-c/tests); g++ for
# libFuzzer (tools/fuzz-smoke) and blktests' helpers.
RDMABLK_TEST_PKGS=(pkg-config g++ make fio groff-base tmux)
# A single-node Ceph cluster for the RBD backend's tests and benchmark (tools/ceph-dev): Debian
# 12's Ceph 16.2 (ceph-common has the `ceph` and `rbd` commands).
RDMABLK_CEPH_PKGS=(ceph-mon ceph-mgr ceph-osd ceph-common)
# Build dependencies, as tools/test (and tools/package, tools/test-rxe, tools/blktests) install
# them: all of the above.
RDMABLK_BUILD_PKGS=("${RDMABLK_CORE_PKGS[@]}" "${RDMABLK_TEST_PKGS[@]}" "${RDMABLK_RBD_PKGS[@]}"
  "${RDMABLK_CEPH_PKGS[@]}")
# Monitoring: promtool (in Debian's prometheus package) and PyYAML, for tools/check-monitoring
# (the alert rules' unit tests, and every metric config/prometheus/ and config/grafana/ name
# exists in a live target's scrape).
RDMABLK_MONITORING_PKGS=(prometheus python3-yaml)
# What tools/package needs besides the build dependencies (and cargo-deb, from crates.io):
# dpkg-shlibdeps and dpkg-architecture, and Debian's package checker.
RDMABLK_PACKAGE_PKGS=(dpkg-dev lintian)
# What tools/test-rxe needs to run a Soft-RoCE VM, plus the Linux NVMe-oF peers' user tools.
# tools/test-rxe installs them (the guest runs this machine's user space over 9p).
RDMABLK_VM_PKGS=(qemu-system-x86 busybox-static cpio kmod dpkg rdma-core ibverbs-utils
  iproute2 nvme-cli fio e2fsprogs util-linux xfsprogs python3)

# Installs RDMABLK_MONITORING_PKGS. Debian's prometheus package also enables and starts a
# Prometheus server (on :9090); rdmablk needs only its promtool. So when this function has just
# installed the package, the service is stopped and disabled right away (and nothing of it
# listens); a prometheus package that was installed before is somebody's server and is left
# as it is.
rdmablk_install_monitoring_deps() {
  local had=0
  dpkg-query -W -f='${Status}' prometheus 2>/dev/null | grep -q "install ok installed" && had=1
  rdmablk_apt_install "${RDMABLK_MONITORING_PKGS[@]}" || return 1
  [ "$had" = 1 ] && return 0
  echo "rdmablk: stopping and disabling the prometheus service the package started (only promtool is used)" >&2
  # Best effort, never fatal: a server that was not started cannot be stopped, and a machine
  # without an init system has nothing to disable.
  if [ -d /run/systemd/system ]; then
    rdmablk_sudo systemctl disable --now prometheus >&2 || true
  else
    # No systemd running: the package's init script may have started it. `systemctl disable`
    # works offline (it also disables the init script); where there is no systemctl,
    # update-rc.d does.
    if [ -x /etc/init.d/prometheus ]; then rdmablk_sudo /etc/init.d/prometheus stop >&2 || true; fi
    if command -v systemctl >/dev/null; then
      rdmablk_sudo systemctl disable prometheus >&2 || true
    elif command -v update-rc.d >/dev/null; then
      rdmablk_sudo update-rc.d prometheus disable >&2 || true
    fi
  fi
  # Whatever started it, the server this install brought must not stay (it was just installed,
  # so it is nobody's).
  rdmablk_sudo pkill -x prometheus 2>/dev/null || true
}

rdmablk_require_cargo() {
  if ! command -v cargo >/dev/null; then
    echo "rdmablk: cargo not found: install a Rust toolchain (https://rustup.rs), then retry" >&2
    return 1
  fi
}

# What tools/quickstart needs: building and running the target and rdmablk-perf
# (RDMABLK_CORE_PKGS), and python3 for its table. No test tool, no Ceph, no Prometheus, no
# rustfmt or clippy: those are tools/test's. librbd-dev is not installed either: the quickstart
# builds the RBD backend only where it is installed already (tools/quickstart says why).
rdmablk_install_quickstart_deps() {
  rdmablk_apt_install "${RDMABLK_CORE_PKGS[@]}" python3 || return 1
  rdmablk_require_cargo
}

# Everything tools/test needs: RDMABLK_BUILD_PKGS, promtool, cargo with rustfmt and clippy.
rdmablk_install_build_deps() {
  rdmablk_apt_install "${RDMABLK_BUILD_PKGS[@]}" || return 1
  rdmablk_install_monitoring_deps || return 1
  rdmablk_require_cargo || return 1
  if command -v rustup >/dev/null; then
    for c in rustfmt clippy; do
      rustup component list --installed 2>/dev/null | grep -q "^$c" ||
        rustup component add "$c" >&2 || return 1
    done
  fi
}
