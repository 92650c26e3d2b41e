#!/bin/bash
# build.sh - (gosiw interop suite) build a qemu test guest that runs the Linux software iWARP driver (siw).
#
# Produces (under $INTEROP_CACHE, default ~/.cache/gosiw-interop):
#   $OUT/vmlinuz          Debian 12 kernel (the one linux-image-amd64 depends on)
#   out/initramfs.gz     busybox /init + kernel modules (incl. siw.ko) + rdma-core
#                        userspace (rping, ucmatose, ibv_*, perftest, rdma, tcpdump)
#
# IMPORTANT: Debian 12's kernel is built with "# CONFIG_RDMA_SIW is not set",
# i.e. it does NOT ship siw.ko. We therefore build siw.ko out-of-tree from the
# matching linux-source-6.1 package against linux-headers-<kver> (same version).
#
# Usage: ./build.sh            (needs root for apt-get install of build tools)
# Env:   KPKG=linux-image-6.1.0-57-amd64   to pin a kernel package explicitly
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gosiw-interop}"
DEBS="$OUT/debs"          # downloaded .deb files
ROOT="$OUT/pkgroot"       # all guest packages extracted here with dpkg -x
IRD="$OUT/initramfs-root" # staging tree for the initramfs
mkdir -p "$OUT" "$DEBS"

log() { echo "[build] $*" >&2; }

# ---------------------------------------------------------------- host tools
HOST_PKGS="cpio kmod gzip binutils file xz-utils make gcc qemu-system-x86"
if [ "$(id -u)" = 0 ]; then
    # fresh machine: no package lists yet
    ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1 || apt-get update
    log "installing host tools: $HOST_PKGS"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $HOST_PKGS >/dev/null
else
    log "not root: assuming $HOST_PKGS are installed"
fi

# ---------------------------------------------------------------- kernel
KPKG="${KPKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')}"
KVER="${KPKG#linux-image-}"       # e.g. 6.1.0-57-amd64
KSRCVER="$(apt-cache show "$KPKG" | awk '/^Version:/{print $2; exit}')"   # e.g. 6.1.192-3
KMAJ="$(echo "$KVER" | cut -d. -f1-2)"                                   # e.g. 6.1
log "kernel package $KPKG (kver $KVER, source version $KSRCVER)"

# kernel headers (for building siw.ko out of tree) are installed on the host
HDRS="/usr/src/linux-headers-$KVER"
if [ ! -e "$HDRS/Makefile" ]; then
    log "installing linux-headers-$KVER (needed to build siw.ko)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "linux-headers-$KVER" >/dev/null
fi

# ---------------------------------------------------------------- download
# Guest packages: fetched with apt-get download (never installed on the host).
TARGETS="$KPKG linux-source-$KMAJ busybox-static ibverbs-providers libibverbs1 librdmacm1
rdmacm-utils ibverbs-utils perftest iproute2 tcpdump libpcap0.8 rdma-core nvme-cli"

# Closure over shared-library packages: follow Depends/PreDepends, but only
# into packages that are libraries (lib*, zlib1g); the ldd check below proves
# the closure is complete.
deps_closure() {
    local queue="$*" seen=" " p d
    while [ -n "${queue// /}" ]; do
        set -- $queue; p="$1"; shift; queue="$*"
        case "$seen" in *" $p "*) continue;; esac
        seen="$seen$p "
        for d in $(apt-cache depends --no-recommends --no-suggests --no-conflicts \
                    --no-breaks --no-replaces --no-enhances "$p" 2>/dev/null |
                   awk '/(Pre)?Depends:/{print $2}' | grep -E '^(lib|zlib1g)' | grep -v '^<' || true); do
            queue="$queue $d"
        done
    done
    echo $seen
}
PKGS="$(deps_closure $TARGETS)"
log "packages: $PKGS"
( cd "$DEBS"
  missing=""
  for p in $PKGS; do ls "${p}"_*.deb >/dev/null 2>&1 || missing="$missing $p"; done
  # one apt-get call for all (the "unsandboxed as root" warning is harmless)
  [ -z "$missing" ] || apt-get download $missing 2>&1 | grep -vE '^(W: Download is performed unsandboxed|Get:)' || true
  for p in $PKGS; do ls "${p}"_*.deb >/dev/null 2>&1 || { log "download of $p failed"; exit 1; }; done
)

# ---------------------------------------------------------------- extract
rm -rf "$ROOT"; mkdir -p "$ROOT"
for f in "$DEBS"/*.deb; do
    case "$(basename "$f")" in linux-source-*) continue;; esac   # only tarball, handled below
    dpkg -x "$f" "$ROOT"
done
MODDIR="$ROOT/lib/modules/$KVER"
cp "$ROOT/boot/vmlinuz-$KVER" "$OUT/vmlinuz"

# Verify: does the Debian kernel ship siw? (It does not for 6.1 / bookworm.)
if find "$MODDIR" -name 'siw.ko*' | grep -q .; then
    log "Debian kernel ships siw.ko"
else
    log "Debian kernel does NOT ship siw.ko ($(grep -E 'RDMA_SIW' "$ROOT/boot/config-$KVER"))"
  if [ -f "$OUT/siw-build/siw.ko" ] && modinfo -F vermagic "$OUT/siw-build/siw.ko" | grep -q "^$KVER " &&
     modinfo -F parm "$OUT/siw-build/siw.ko" | grep -q peer_to_peer; then
    log "reusing previously built $OUT/siw-build/siw.ko (delete it to rebuild)"
  else
    log "building siw.ko from linux-source-$KMAJ $KSRCVER"
    SRCDEB="$(ls "$DEBS"/linux-source-"$KMAJ"_"$KSRCVER"_all.deb)"
    rm -rf "$OUT/siw-src" "$OUT/siw-build"; mkdir -p "$OUT/siw-src" "$OUT/siw-build"
    dpkg-deb --fsys-tarfile "$SRCDEB" | tar -x -C "$OUT/siw-src" ./usr/src/linux-source-"$KMAJ".tar.xz
    tar -xJf "$OUT/siw-src/usr/src/linux-source-$KMAJ.tar.xz" -C "$OUT/siw-src" \
        "linux-source-$KMAJ/drivers/infiniband/sw/siw"
    cp "$OUT/siw-src/linux-source-$KMAJ/drivers/infiniband/sw/siw/"* "$OUT/siw-build/"
    # Lab patch: expose siw's compile-time MPA knobs as read-only module parameters
    # (defaults unchanged = stock behaviour). Allows e.g. `insmod siw.ko mpa_crc_required=1`
    # or kernel cmdline siw.peer_to_peer=1 (init passes siw.* to insmod).
    for v in try_gso mpa_crc_required mpa_crc_strict siw_tcp_nagle peer_to_peer; do
        sed -i "s/^const bool $v;/bool $v;\nmodule_param($v, bool, 0444);/" "$OUT/siw-build/siw_main.c"
        sed -i "s/^extern const bool $v;/extern bool $v;/" "$OUT/siw-build/siw.h"
    done
    sed -i 's/^u_char mpa_version = MPA_REVISION_2;/&\nmodule_param(mpa_version, byte, 0444);/' "$OUT/siw-build/siw_main.c"
    make -C "$HDRS" M="$OUT/siw-build" CONFIG_RDMA_SIW=m modules >"$OUT/siw-build.log" 2>&1 ||
        { tail -30 "$OUT/siw-build.log"; exit 1; }
  fi
    mkdir -p "$MODDIR/extra"
    strip --strip-debug -o "$MODDIR/extra/siw.ko" "$OUT/siw-build/siw.ko"
fi
depmod -b "$ROOT" "$KVER"

# ---------------------------------------------------------------- initramfs tree
rm -rf "$IRD"
mkdir -p "$IRD"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,mnt/host,run,var/run,root,lib/modules}
cp "$ROOT/bin/busybox" "$IRD/bin/busybox"
ln -s busybox "$IRD/bin/sh"

# Modules, in dependency order (modprobe --show-depends resolves modules.dep).
# crc32c_generic: siw needs the "crc32c" shash (qemu64 CPU has no SSE4.2 for crc32c-intel).
# NVMe over Fabrics (RDMA): the kernel host (nvme-rdma) and target (nvmet-rdma),
# with their CRC and protection-information helpers; configfs for nvmet.
MODS="crc32c_generic libcrc32c ib_core ib_uverbs iw_cm ib_cm rdma_cm rdma_ucm siw
virtio_pci virtio_net 9pnet_virtio 9p
crc64 crc64_rocksoft_generic crc64-rocksoft crct10dif_common crct10dif_generic crc-t10dif t10-pi
configfs nvme-core nvme-fabrics nvme-rdma nvmet nvmet-rdma"
: > "$IRD/modules.list"
for m in $MODS; do
    modprobe -d "$ROOT" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
    rel="${ko#$ROOT/}"
    mkdir -p "$IRD/$(dirname "$rel")"
    cp "$ko" "$IRD/$rel"
    echo "/$rel" >> "$IRD/modules.list"
done
log "modules: $(xargs -n1 basename < "$IRD/modules.list" | tr '\n' ' ')"

# Userspace binaries we want in the guest
BINS="usr/bin/rping usr/bin/ucmatose usr/bin/rdma_server usr/bin/rdma_client usr/bin/udaddy
usr/bin/mckey usr/bin/rstream usr/bin/riostream usr/bin/cmtime usr/bin/rdma_xserver usr/bin/rdma_xclient
usr/bin/ibv_devices usr/bin/ibv_devinfo usr/bin/ibv_rc_pingpong usr/bin/ibv_srq_pingpong
usr/bin/ibv_uc_pingpong usr/bin/ibv_ud_pingpong
usr/bin/ib_send_bw usr/bin/ib_write_bw usr/bin/ib_read_bw usr/bin/ib_write_lat usr/bin/ib_send_lat
usr/bin/ib_read_lat usr/bin/ib_atomic_bw
usr/bin/rdma usr/bin/tcpdump usr/sbin/nvme"
for b in $BINS; do
    if [ -e "$ROOT/$b" ]; then
        mkdir -p "$IRD/$(dirname "$b")"; cp -a "$ROOT/$b" "$IRD/$b"
    else
        log "warning: $b not found in extracted packages"
    fi
done

# Shared libraries: copy the whole extracted lib dirs (simple and complete).
for d in lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu lib64; do
    [ -d "$ROOT/$d" ] || continue
    mkdir -p "$IRD/$d"
    cp -a "$ROOT/$d/." "$IRD/$d/"
done
# drop big things the guest never needs
rm -rf "$IRD/usr/lib/x86_64-linux-gnu/gconv" "$IRD/usr/lib/x86_64-linux-gnu/perl"* \
       "$IRD/usr/lib/x86_64-linux-gnu/"*.a
# verbs provider config (/etc/libibverbs.d/siw.driver etc.) + rdma config
cp -a "$ROOT/etc/libibverbs.d" "$IRD/etc/"
[ -d "$ROOT/etc/rdma" ] && cp -a "$ROOT/etc/rdma" "$IRD/etc/"

# Check every binary's libraries resolve inside the guest tree (not the host).
LDP="$IRD/lib/x86_64-linux-gnu:$IRD/usr/lib/x86_64-linux-gnu:$IRD/usr/lib/x86_64-linux-gnu/libibverbs"
bad=0
for f in $(cd "$IRD" && find usr/bin usr/sbin usr/lib/x86_64-linux-gnu/libibverbs -type f); do
    out="$(LD_LIBRARY_PATH="$LDP" ldd "$IRD/$f" 2>&1 || true)"
    if echo "$out" | grep -q 'not found'; then log "missing lib for $f:"; echo "$out" | grep 'not found'; bad=1; fi
    # a lib resolved to a host path means the guest tree lacks it
    miss="$(echo "$out" | awk '/=>/{print $3}' | grep -v "^$IRD" | grep -v '^$' || true)"
    if [ -n "$miss" ]; then log "lib resolved outside guest tree for $f: $miss"; bad=1; fi
done
[ "$bad" = 0 ] || { log "library closure incomplete"; exit 1; }

# Minimal /etc
cat > "$IRD/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
tcpdump:x:104:109::/nonexistent:/bin/false
EOF
cat > "$IRD/etc/group" <<'EOF'
root:x:0:
tcpdump:x:109:
EOF
echo "127.0.0.1 localhost" > "$IRD/etc/hosts"
printf 'hosts: files\n' > "$IRD/etc/nsswitch.conf"

cp "$HERE/init" "$IRD/init"
chmod 755 "$IRD/init"

# ---------------------------------------------------------------- pack
( cd "$IRD" && find . | LC_ALL=C sort | cpio -o -H newc --quiet ) | gzip -1 > "$OUT/initramfs.gz"
log "done: $OUT/vmlinuz $(du -h "$OUT/initramfs.gz" | cut -f1) $OUT/initramfs.gz"
