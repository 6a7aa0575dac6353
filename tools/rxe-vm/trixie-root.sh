#!/usr/bin/env bash
# trixie-root.sh - builds, once, the Debian 13 (trixie) root file system the VM boots with when
# a test needs a newer userland than this machine's Debian 12: nvme-cli >= 2.5 and tlshd
# (ktls-utils) for NVMe/TCP with TLS, which Debian 12 lacks. Prints the root's path.
#
#   tools/rxe-vm/trixie-root.sh            (then: RXE_VM_ROOT=<that path> run-in-vm.sh ...)
#
# The root: debootstrap --variant=minbase trixie from http://deb.debian.org/debian with what
# the harness's guest script needs (bash, kmod, iproute2 with `rdma`, procps, hostname), the
# NVMe/TLS tools (ktls-utils, keyutils, fio) and the shared libraries rdmablk's binaries built
# on this machine load (libssl3t64, libibverbs1 and its providers, librdmacm1t64, librbd1,
# librados2: the same sonames as Debian 12's, newer builds); plus nvme-cli 2.16 with libnvme
# 1.16 from forky (Debian 14), the first libnvme that derives TLS PSKs as the specification
# (RFC 8446's HkdfLabel) does: trixie's own nvme-cli 2.13 / libnvme 1.13 derive them the old,
# wrong way (docs/tcp.md); those two are unpacked under /opt/nvme-cli-2.13 too, run with
# LD_LIBRARY_PATH=/opt/nvme-cli-2.13/lib. And forky's tlshd (ktls-utils 1.4.0, with GnuTLS
# 3.8.13 and libnl 3.12) under /opt/ktls-utils-1.4.0 (LD_LIBRARY_PATH=/opt/ktls-utils-1.4.0/lib):
# trixie's tlshd 1.0.0 is built on GnuTLS 3.8.9, which computes every PSK binder with SHA-256,
# so its SHA-384 PSKs (TLS_AES_256_GCM_SHA384) fail against OpenSSL peers; GnuTLS 3.8.11's
# gnutls_psk_allocate_*_credentials2, which ktls-utils >= 1.0-rc2 uses when built on it,
# takes the PSK's hash.
#
# Cached: a finished root has .ok holding this recipe's checksum; a root of another recipe
# is built again (into a temporary directory, renamed into place, so an interrupted build
# leaves no half root). Needs root, debootstrap (apt-get install debootstrap) and the Debian
# mirror. ~270 MB, ~1 min.
#
# Env: RDMABLK_PEERS_DIR (/var/tmp/rdmablk-peers: the root is trixie-root there, the forky
#      packages' private apt state apt-forky)
# Exit: 0 and the path on stdout; 1 with the reason on stderr if it cannot be built.
set -euo pipefail

DIR=${RDMABLK_PEERS_DIR:-/var/tmp/rdmablk-peers}
ROOTFS=$DIR/trixie-root
MIRROR=http://deb.debian.org/debian
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
INCLUDE=bash,kmod,iproute2,procps,hostname,util-linux,coreutils,gawk,diffutils,python3,ktls-utils,keyutils,fio,uuid-runtime,libjson-c5,libkeyutils1,libssl3t64,libibverbs1,ibverbs-providers,librdmacm1t64,librbd1,librados2
# From forky: nvme-cli and its libnvme (libc6 >= 2.38: trixie's 2.41 does)
FORKY_PKGS="nvme-cli=2.16-1 libnvme1t64=1.16.2-1+b1"
TRIXIE_OLD_PKGS="nvme-cli=2.13-2 libnvme1t64=1.13-2"
FORKY_TLSHD_PKGS="ktls-utils=1.4.0-1 libgnutls30t64=3.8.13-1 libnl-3-200=3.12.0-2+b1 libnl-genl-3-200=3.12.0-2+b1"

die() { echo "trixie-root: $*" >&2; exit 1; }

RECIPE=$( { echo "$INCLUDE"; echo "$FORKY_PKGS"; echo "$TRIXIE_OLD_PKGS"; echo "$FORKY_TLSHD_PKGS"; echo v2; } | md5sum | cut -c1-32)
[ -f "$ROOTFS/.ok" ] && [ "$(cat "$ROOTFS/.ok")" = "$RECIPE" ] && { echo "$ROOTFS"; exit 0; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap)"
command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install debootstrap)"
[ -f "$KEYRING" ] || die "no $KEYRING (apt-get install debian-archive-keyring)"
mkdir -p "$DIR"
exec 8>"$DIR/.trixie-root.lock"
flock 8
# another caller may have built it while this one waited
[ -f "$ROOTFS/.ok" ] && [ "$(cat "$ROOTFS/.ok")" = "$RECIPE" ] && { echo "$ROOTFS"; exit 0; }

# Packages from forky (and trixie's nvme-cli for /opt), downloaded through a private apt state:
# the machine's own sources stay untouched.
download() { # download SUITE DEST PKG=VER...
  local suite=$1 dest=$2 a=$DIR/apt-$1; shift 2
  mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$dest"
  echo "deb [signed-by=$KEYRING] $MIRROR $suite main" >"$a/sources.list"
  local o=(-o "Dir::Etc::SourceList=$a/sources.list" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$a/lists" -o "Dir::Cache=$a/cache" -o Dir::State::status=/dev/null)
  apt-get "${o[@]}" update >&2 || return 1
  (cd "$dest" && apt-get "${o[@]}" download "$@" >&2)
}

TMP=$(mktemp -d "$DIR/trixie-root.new.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "trixie-root: debootstrap trixie into $TMP (a few minutes) ..." >&2
debootstrap --variant=minbase --keyring="$KEYRING" --include="$INCLUDE" trixie "$TMP" "$MIRROR" \
  >"$DIR/debootstrap.log" 2>&1 ||
  die "debootstrap failed (last lines of $DIR/debootstrap.log: $(tail -n 3 "$DIR/debootstrap.log" | tr '\n' ' '))"

download forky "$TMP/tmp/forky" $FORKY_PKGS || die "cannot download $FORKY_PKGS from forky"
chroot "$TMP" sh -c 'dpkg -i /tmp/forky/*.deb' >&2 || die "dpkg -i of the forky packages failed"
rm -rf "$TMP/tmp/forky"
# to_opt SUITE NAME PROGRAM "PKG=VER..." LIBGLOB...: PROGRAM (usr/sbin) and the libraries matching
# LIBGLOB of those packages, unpacked into /opt/NAME and /opt/NAME/lib of the new root.
to_opt() {
  local suite=$1 name=$2 prog=$3 pkgs=$4 x=$DIR/opt-debs; shift 4
  rm -rf "$x"
  # shellcheck disable=SC2086  # $pkgs: several packages
  download "$suite" "$x" $pkgs || die "cannot download $pkgs from $suite"
  for d in "$x"/*.deb; do dpkg-deb -x "$d" "$x/tree"; done
  mkdir -p "$TMP/opt/$name/lib"
  cp "$x/tree/usr/sbin/$prog" "$TMP/opt/$name/$prog"
  for g in "$@"; do cp -a "$x"/tree/usr/lib/x86_64-linux-gnu/$g "$TMP/opt/$name/lib/"; done
  rm -rf "$x"
}
to_opt trixie nvme-cli-2.13 nvme "$TRIXIE_OLD_PKGS" 'libnvme.so.*'
to_opt forky ktls-utils-1.4.0 tlshd "$FORKY_TLSHD_PKGS" 'libgnutls.so.*' 'libnl-3.so.*' \
  'libnl-genl-3.so.*'

chroot "$TMP" nvme version >&2 || die "nvme-cli does not run in the new root"
[ -x "$TMP/usr/sbin/tlshd" ] || die "no tlshd in the new root"
chroot "$TMP" env LD_LIBRARY_PATH=/opt/ktls-utils-1.4.0/lib /opt/ktls-utils-1.4.0/tlshd --version >&2 ||
  die "forky's tlshd does not run in the new root"
chroot "$TMP" env LD_LIBRARY_PATH=/opt/nvme-cli-2.13/lib /opt/nvme-cli-2.13/nvme version >&2 ||
  die "trixie's nvme-cli 2.13 does not run in the new root"
apt_clean() { rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*_Packages; }
apt_clean "$TMP"
echo "$RECIPE" >"$TMP/.ok"
rm -rf "$ROOTFS"
mv "$TMP" "$ROOTFS"
trap - EXIT
echo "$ROOTFS"
