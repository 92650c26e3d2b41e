#!/bin/bash
# run-cm-lab.sh - gosiw's connection manager against Linux siw in the
# linux-siw-vm lab (its directory given as LAB, built there with
# LAB_OUT=$LAB_OUT ./build.sh). Writes $LAB_OUT/cm-lab.txt.
#
#   LAB=PATH/TO/linux-siw-vm LAB_OUT=/tmp/siw-lab ./run-cm-lab.sh
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
LAB="${LAB:?set LAB to the directory of the linux-siw-vm lab}"
export LAB_OUT="${LAB_OUT:-/tmp/siw-lab}"
SH="$LAB_OUT/share"; mkdir -p "$SH" "$LAB_OUT/bin"
exec > >(tee "$LAB_OUT/cm-lab.txt") 2>&1

(cd "$ROOT" && go build -o "$LAB_OUT/bin/cmlab" ./test/interop/cmlab && go build -o "$LAB_OUT/bin/siw" ./cmd/siw) || exit 1
CMLAB="$LAB_OUT/bin/cmlab"; SIW="$LAB_OUT/bin/siw"

echo "######## (1) Linux rping -c -> gosiw listener 127.0.0.1:7174 (accept 1, reject 1)"
echo "\$ cmlab listen -addr 127.0.0.1:7174 -accept 1 -reject 1"
"$CMLAB" listen -addr 127.0.0.1:7174 -accept 1 -reject 1 -wait 150s &
LPID=$!
sleep 0.5
TIMEOUT=200 QUIET=1 "$LAB/run.sh" "$HERE/guest-rping-clients.sh" >/dev/null 2>&1
wait $LPID; echo "cmlab listen rc=$?"
echo "-- guest side:"; cat "$LAB_OUT/results/cm-rping-clients.txt"

echo; echo "######## (2) gosiw Connect -> Linux rping -s (hostfwd 127.0.0.1:17174 -> :7174), then siw probe"
rm -f "$SH/READY" "$SH/STOP"
HOSTFWD="tcp:127.0.0.1:17174-:7174" TIMEOUT=400 QUIET=1 "$LAB/run.sh" "$HERE/guest-rping-servers.sh" >/dev/null 2>&1 &
RPID=$!
waitready() { for i in $(seq 1 120); do [ "$(cat "$SH/READY" 2>/dev/null)" = "$1" ] && return 0; sleep 0.5; done; echo "guest never said $1"; return 1; }
waitready server1 && { echo "\$ cmlab connect -addr 127.0.0.1:17174"; "$CMLAB" connect -addr 127.0.0.1:17174; echo "rc=$?"; }
waitready server2 && { echo "\$ cmlab connect -addr 127.0.0.1:17174 -p2p"; "$CMLAB" connect -addr 127.0.0.1:17174 -p2p; echo "rc=$?"; }
waitready server3 && { echo "\$ cmlab connect -addr 127.0.0.1:17174 -crc -ird 128 -ord 128"; "$CMLAB" connect -addr 127.0.0.1:17174 -crc -ird 128 -ord 128; echo "rc=$?"; }
if waitready persistent; then
  echo "\$ siw probe 127.0.0.1:17174"; "$SIW" probe 127.0.0.1:17174; echo "rc=$?"
  echo "\$ siw probe --json --request-timeout-wait 0 127.0.0.1:17174"; "$SIW" probe --json --request-timeout-wait 0 127.0.0.1:17174; echo "rc=$?"
  # Last, as it may take the guest's iw_cm down: offer only the Send RTR;
  # siw proposes Write, gosiw answers with Terminate 0x07 and closes
  # without an RTR.
  echo "\$ cmlab connect -addr 127.0.0.1:17174 -p2p -rtrs send"; "$CMLAB" connect -addr 127.0.0.1:17174 -p2p -rtrs send; echo "rc=$?"
  sleep 3
fi
touch "$SH/STOP"
wait $RPID
echo "-- guest side:"; cat "$LAB_OUT/results/cm-rping-servers.txt"
