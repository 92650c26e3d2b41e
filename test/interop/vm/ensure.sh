#!/bin/bash
# ensure.sh - build the interop VM unless a build of the same scripts is cached.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gosiw-interop}"
stamp="$(cat "$HERE/build.sh" "$HERE/init" | sha256sum | cut -c1-16)"
if [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initramfs.gz" ] && [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "[interop] using the cached VM in $OUT"
    exit 0
fi
echo "[interop] building the VM into $OUT (Debian packages, siw.ko from the kernel source; a few minutes)"
mkdir -p "$OUT"
"$HERE/build.sh" > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "[interop] VM build FAILED"; exit 1; }
echo "$stamp" > "$OUT/stamp"
echo "[interop] VM built: $(du -h "$OUT/initramfs.gz" | cut -f1) initramfs"
