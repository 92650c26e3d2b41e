#!/bin/bash
# run.sh - (gosiw interop suite) boot the siw test guest under qemu (TCG), run one guest script, exit.
#
# Usage: ./run.sh GUEST_SCRIPT
#   The script is copied to out/share/cmd.sh; out/share is the 9p share that
#   the guest mounts on /mnt/host (results go to /mnt/host/... = out/share/...).
#   qemu exits when the guest powers off (init does that after the script).
#
# Env (all optional):
#   TIMEOUT=600                    overall wall-clock limit in seconds (qemu is killed)
#   HOSTFWD="tcp:127.0.0.1:17174-:7174"   comma-separated slirp hostfwd rules;
#                                  ALWAYS bind a loopback address (127.0.0.0/8) on the host side
#   MEM=1024  SMP=2                guest RAM (MiB) and vCPUs
#   LOG=out/logs/<script>.log      serial console log
#   QUIET=1                        do not echo the console to stdout
#   KAPPEND="siw.mpa_crc_required=1"  extra kernel cmdline words (siw.* -> siw insmod options)
# After the guest exits, out/share/pcaps/* and out/share/results/* are copied to
# out/pcaps/ and out/results/.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gosiw-interop}"
SCRIPT="${1:?usage: $0 GUEST_SCRIPT}"
NAME="$(basename "$SCRIPT" .sh)"
TIMEOUT="${TIMEOUT:-600}"
HOSTFWD="${HOSTFWD:-tcp:127.0.0.1:17174-:7174}"
MEM="${MEM:-1024}"
SMP="${SMP:-2}"
SHARE="$OUT/share"
mkdir -p "$OUT/logs" "$SHARE"
LOG="${LOG:-$OUT/logs/$NAME.log}"

[ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initramfs.gz" ] || { echo "run ./build.sh first" >&2; exit 1; }
cp "$SCRIPT" "$SHARE/cmd.sh"
rm -f "$SHARE/DONE"

# hostfwd rules -> ",hostfwd=...,hostfwd=..."
FWD=""
IFS=',' read -ra RULES <<< "$HOSTFWD"
for r in "${RULES[@]}"; do
    # Loopback only (127.0.0.0/8): the tests pick a random address there.
    [[ "$r" =~ ^(tcp|udp):127\.[0-9]+\.[0-9]+\.[0-9]+: ]] || { echo "hostfwd must bind an address of 127.0.0.0/8: $r" >&2; exit 1; }
    FWD="$FWD,hostfwd=$r"
done

: > "$LOG"
START=$(date +%s%N)
# -cpu max: gives the guest SSE4.2 etc. (crc32c-intel loads); TCG multi-threaded.
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 \
    -nographic -no-reboot -monitor none -serial "file:$LOG" \
    -accel tcg,thread=multi -cpu max -m "$MEM" -smp "$SMP" \
    -kernel "$OUT/vmlinuz" -initrd "$OUT/initramfs.gz" \
    -append "console=ttyS0 panic=-1 loglevel=4 ${KAPPEND:-}" \
    -netdev "user,id=n0,net=10.0.2.0/24,host=10.0.2.2${FWD}" \
    -device virtio-net-pci,netdev=n0 \
    -virtfs "local,path=$SHARE,mount_tag=host0,security_model=none,id=fs0" \
    </dev/null &
QPID=$!
echo "[run] qemu pid $QPID, log $LOG, hostfwd $HOSTFWD" >&2
if [ "${QUIET:-0}" != 1 ]; then tail -n +1 --pid=$QPID -f "$LOG" & fi
rc=0; wait $QPID || rc=$?
sleep 0.3
END=$(date +%s%N)
# collect what the guest wrote into the share
mkdir -p "$OUT/pcaps" "$OUT/results"
[ -d "$SHARE/pcaps" ] && cp -a "$SHARE/pcaps/." "$OUT/pcaps/"
[ -d "$SHARE/results" ] && cp -a "$SHARE/results/." "$OUT/results/"
echo "[run] qemu exited rc=$rc after $(( (END - START) / 1000000 )) ms (guest script $NAME)" >&2
exit $rc
