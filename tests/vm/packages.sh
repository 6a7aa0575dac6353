#!/usr/bin/env bash
# packages.sh - the Debian packages as an operator meets them. Run it INSIDE the rxe VM, from
# the repository root, after tools/package built them into build/package:
#
#   tools/rxe-vm/run-in-vm.sh bash tests/vm/packages.sh
#
# Steps (a failure names its step):
#   install    dpkg -i of all five packages; the unit is installed but not enabled; the
#              conffile, manual pages, completions, the library's ldconfig entry and its
#              pkg-config file are where Debian puts them
#   unedited   the installed /etc/rdmablk/target.toml as shipped: the daemon refuses to start
#              (no hang), naming subsystem[0].hosts; with the host NQN added, naming the
#              NVMe/TCP listener's documentation address 192.0.2.1; then the address is set;
#              its commented-out RDMA listener, uncommented as its comment says (in a copy),
#              passes --check
#   serve      (the directories systemd's StateDirectory= and RuntimeDirectory= would make)
#              /usr/sbin/rdmablk-target from the edited installed config; rdmablk-ctl status over the default socket; the Linux host
#              connects (nvme connect -t tcp: the packaged listener is NVMe/TCP), writes a
#              pattern and reads it back through O_DIRECT
#   c-api      the C example, built against the installed librdmablk-c-dev with pkg-config
#              only, runs its checks against the daemon (tcp://)
#   fio        fio with the installed fio-rdmablk engine: crc32c-verified writes and reads
#              (tcp://)
#   purge      SIGTERM (exit 0), dpkg --purge of all five: every file they installed is gone,
#              /etc/rdmablk too; the namespace's data in /var/lib/rdmablk is kept (policy)
# Prints RESULT: PASS or FAIL.
#
# Env: PKGDIR (build/package), RXE_VM_IP (10.0.2.15).
set -uo pipefail
# (No process substitution: the VM has no /dev/fd.)

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PKGDIR=${PKGDIR:-$ROOT/build/package}
IP=${RXE_VM_IP:-10.0.2.15}
# The packaged configuration's listener is NVMe/TCP (its RDMA one is commented out, so that a
# machine without an RDMA device starts): the Linux host, the C API and fio use it.
TRTYPE=tcp
source "$(dirname "${BASH_SOURCE[0]}")/nvme-host.sh" # nvme_connect
PKGS=(rdmablk-target rdmablk-tools librdmablk-c0 librdmablk-c-dev fio-rdmablk)
NQN=nqn.2026-11.io.rdmablk:disks # the packaged configuration's subsystem
CONF=/etc/rdmablk/target.toml
WORK=$(mktemp -d /tmp/rdmablk-pkg.XXXXXX)
TPID=
MADE_RUN=0

say() { echo "packages: $*"; }
exec 3>&1
fail() {
  exec 1>&3 2>&3
  say "FAIL: $*"
  echo "----- target log (last 30 lines) -----"; tail -n 30 "$WORK/target.log" 2>/dev/null
  echo "----- dmesg (last 20 lines) -----"; dmesg | tail -n 20
  cleanup
  echo "RESULT: FAIL (step ${STEP:-setup}: $*)"
  exit 1
}
cleanup() {
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  [ -n "$TPID" ] && { kill -TERM "$TPID" 2>/dev/null; wait "$TPID" 2>/dev/null; TPID=; }
  dpkg --purge "${PKGS[@]}" >/dev/null 2>&1
  rm -rf /var/lib/rdmablk "$WORK"
  [ "$MADE_RUN" = 1 ] && rm -rf /run/rdmablk
}
STEP=setup
step() { STEP=$1; say "--- step $STEP (at ${SECONDS}s)"; }

files=()
for p in "${PKGS[@]}"; do
  f=("$PKGDIR/${p}"_*.deb)
  [ ${#f[@]} = 1 ] && [ -f "${f[0]}" ] || fail "want one $PKGDIR/${p}_*.deb, found ${#f[@]} (run tools/package)"
  files+=("${f[0]}")
done
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "ok installed" >/dev/null &&
    fail "$p is installed already (this test installs and purges it)"
done
[ -e /var/lib/rdmablk ] && fail "/var/lib/rdmablk exists already"
# /run/rdmablk may be left by an earlier step's target (the default control socket's
# directory): it is made here only if missing, and removed at the end only if made here.
[ -e /run/rdmablk ] || MADE_RUN=1

step install
# man-db's dpkg trigger rebuilds the whole manual index, minutes under TCG; the guest's root
# is a throw-away overlay, so switch its auto-update off (the pages are checked as files).
rm -f /var/lib/man-db/auto-update
dpkg -i "${files[@]}" >"$WORK/dpkg-i.log" 2>&1 || { cat "$WORK/dpkg-i.log"; fail "dpkg -i"; }
for p in "${PKGS[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p")" = "install ok installed" ] || fail "$p not installed"
done
unit=/lib/systemd/system/rdmablk-target.service
[ -f "$unit" ] || [ -f "/usr$unit" ] || fail "no rdmablk-target.service in /lib/systemd/system"
ls /etc/systemd/system/*.wants/rdmablk-target.service >/dev/null 2>&1 &&
  fail "the unit was enabled at install (it must wait for the operator's configuration)"
dpkg-query -W -f='${Conffiles}\n' rdmablk-target | grep " $CONF " >/dev/null ||
  fail "$CONF is not a conffile of rdmablk-target"
for m in man8/rdmablk-target.8.gz man8/rdmablk-ctl.8.gz man1/rdmablk-perf.1.gz; do
  [ -f "/usr/share/man/$m" ] || fail "no /usr/share/man/$m"
done
zcat /usr/share/man/man8/rdmablk-target.8.gz | grep '^\.SH CONFIGURATION' >/dev/null ||
  fail "rdmablk-target(8) has no CONFIGURATION section"
for c in bash-completion/completions/rdmablk-ctl zsh/vendor-completions/_rdmablk-target \
  fish/vendor_completions.d/rdmablk-perf.fish; do
  [ -f "/usr/share/$c" ] || fail "no /usr/share/$c"
done
bash -n /usr/share/bash-completion/completions/rdmablk-target || fail "bash completion syntax"
ldconfig -p | grep 'librdmablk_c\.so\.0 ' >/dev/null || fail "librdmablk_c.so.0 is not in ldconfig's cache"
[ "$(pkg-config --modversion rdmablk)" = 0.1.0 ] || fail "pkg-config rdmablk: $(pkg-config --modversion rdmablk 2>&1)"
say "installed: $(dpkg-query -W -f='${Package} ${Version}, ' "${PKGS[@]}")"

step unedited
# What systemd makes for the unit (StateDirectory=, RuntimeDirectory=); the VM has no systemd.
mkdir -p /var/lib/rdmablk && install -d -m 0700 /run/rdmablk
# refused WHAT: the daemon on $CONF as it is now exits non-zero (not a hang) and its error
# contains WHAT.
refused() {
  timeout 30 /usr/sbin/rdmablk-target --config "$CONF" >"$WORK/refused.out" 2>&1
  local rc=$?
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "$CONF: exit $rc (want a refusal naming $1)"
  grep -qF "$1" "$WORK/refused.out" || fail "the refusal does not name $1: $(cat "$WORK/refused.out")"
  say "refused, naming $1: $(grep -F "$1" "$WORK/refused.out" | head -1)"
}
# As shipped: no host may connect yet, and the listener's address is a documentation one.
refused "subsystem[0].hosts"
[ -s /etc/nvme/hostnqn ] || fail "no /etc/nvme/hostnqn (nvme-cli writes it at install)"
HOSTNQN=$(cat /etc/nvme/hostnqn)
# The operator's edits, as the file's header asks for them: the host first...
sed -i "s|^hosts = \[|hosts = [\n    \"$HOSTNQN\",|" "$CONF"
grep -qF "\"$HOSTNQN\"," "$CONF" || fail "editing hosts in $CONF"
refused "192.0.2.1"
# ... then the address.
sed -i "s/^address = \"192\.0\.2\.1\"/address = \"$IP\"/" "$CONF"
grep -q "^address = \"$IP\"" "$CONF" || fail "editing the address in $CONF"
# The commented-out RDMA listener, as an operator with an RDMA device uncomments it (its
# comment: remove the "# " from its five lines, set the address), in a copy: a valid second
# listener.
sed -e '/^# \[\[listener\]\]$/,/^# port = /s/^# //' \
  -e "s/^address = \"192\.0\.2\.1\"/address = \"$IP\"/" "$CONF" >"$WORK/with-rdma.toml"
[ "$(grep -c '^\[\[listener\]\]$' "$WORK/with-rdma.toml")" = 2 ] &&
  grep -q '^transport = "rdma"$' "$WORK/with-rdma.toml" ||
  fail "uncommenting the RDMA listener of $CONF did not give a second listener"
/usr/sbin/rdmablk-target --check --config "$WORK/with-rdma.toml" >"$WORK/check.out" 2>&1 ||
  fail "the RDMA listener, uncommented, is refused: $(cat "$WORK/check.out")"
say "the commented-out RDMA listener, uncommented: $(grep -F 'configuration is valid' "$WORK/check.out")"

step serve
modprobe "nvme-$TRTYPE" || fail "modprobe nvme-$TRTYPE"
/usr/sbin/rdmablk-target --config "$CONF" >"$WORK/target.out" 2>"$WORK/target.log" &
TPID=$!
for _ in $(seq 1 600); do
  grep -q '^ready$' "$WORK/target.out" && break
  kill -0 "$TPID" 2>/dev/null || fail "the daemon exited at start"
  sleep 0.1
done
grep -q '^ready$' "$WORK/target.out" || fail "no ready line within 60 s"
/usr/sbin/rdmablk-ctl status >"$WORK/status.out" 2>&1 || fail "rdmablk-ctl status: $(cat "$WORK/status.out")"
grep -qF "$NQN" "$WORK/status.out" || fail "rdmablk-ctl status does not show $NQN"
nvme_connect -s 4420 -n "$NQN" >"$WORK/connect.out" 2>&1 || fail "nvme connect: $(cat "$WORK/connect.out")"
dev=
for _ in $(seq 1 100); do
  for b in /sys/block/nvme*n*; do
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && dev=/dev/${b##*/}
  done
  [ -n "$dev" ] && [ -b "$dev" ] && break
  sleep 0.1
done
[ -n "$dev" ] || fail "no block device for $NQN"
head -c $((4 << 20)) /dev/urandom >"$WORK/pattern"
dd if="$WORK/pattern" of="$dev" bs=1M oflag=direct status=none || fail "write to $dev"
dd if="$dev" of="$WORK/back" bs=1M count=4 iflag=direct status=none || fail "read from $dev"
cmp -s "$WORK/pattern" "$WORK/back" || fail "read back differs from what was written"
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
say "the Linux host wrote and read back 4 MiB on $dev"

URL="tcp://$IP:4420/$NQN"
step c-api
# shellcheck disable=SC2046 # pkg-config's flags are words
gcc -Wall -o "$WORK/example" "$ROOT/initiator/examples/c/rdmablk_example.c" \
  $(pkg-config --cflags --libs rdmablk) || fail "building the C example with pkg-config rdmablk"
ldd "$WORK/example" | grep '/librdmablk_c\.so\.0 ' >/dev/null || fail "the example does not load the installed library"
"$WORK/example" "$URL" >"$WORK/example.out" 2>&1 || fail "the C example: $(tail -3 "$WORK/example.out")"
grep -q '^rdmablk_example: ok' "$WORK/example.out" || fail "the C example did not say ok"
say "$(tail -1 "$WORK/example.out")"

step fio
engine=$(dpkg -L fio-rdmablk | grep '/librdmablk_fio\.so$')
[ -f "$engine" ] || fail "fio-rdmablk has no librdmablk_fio.so"
fio --name=pkg --ioengine="external:$engine" --filename="$(echo "$URL/1" | sed 's/:/\\:/g')" \
  --rw=randwrite --bs=16k --size=8m --iodepth=8 --verify=crc32c --do_verify=1 \
  --verify_state_save=0 --output="$WORK/fio.out" || fail "fio: $(tail -5 "$WORK/fio.out")"
grep -q 'err= 0' "$WORK/fio.out" || fail "fio reported errors: $(grep err= "$WORK/fio.out")"
say "fio through the packaged engine: $(grep -oE 'IOPS=[^,]+' "$WORK/fio.out" | paste -sd' ')"

step purge
kill -TERM "$TPID"
wait "$TPID"
rc=$?
TPID=
[ "$rc" = 0 ] || fail "the daemon exited $rc on SIGTERM"
owned=()
for p in "${PKGS[@]}"; do
  while read -r f; do [ -f "$f" ] || [ -L "$f" ] && owned+=("$f"); done <<<"$(dpkg -L "$p")"
done
dpkg --purge "${PKGS[@]}" >"$WORK/purge.log" 2>&1 || { cat "$WORK/purge.log"; fail "dpkg --purge"; }
left=()
for f in "${owned[@]}"; do [ -e "$f" ] || [ -L "$f" ] && left+=("$f"); done
[ ${#left[@]} = 0 ] || fail "left after the purge: ${left[*]}"
[ -e /etc/rdmablk ] && fail "/etc/rdmablk is left after the purge: $(ls -A /etc/rdmablk)"
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "ok installed" >/dev/null && fail "$p still installed"
done
[ -f /var/lib/rdmablk/disk1.img ] || fail "the purge removed the namespace's data"
say "purged: ${#owned[@]} files gone, /etc/rdmablk gone, /var/lib/rdmablk/disk1.img kept"
rm -rf /var/lib/rdmablk "$WORK"
[ "$MADE_RUN" = 1 ] && rm -rf /run/rdmablk
echo "RESULT: PASS"
