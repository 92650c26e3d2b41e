#!/bin/bash
# run-iwcm-bug.sh - reproduce Linux 6.1's "kernel BUG at drivers/infiniband/core/iwcm.c:969"
# (cm_close_handler: CLOSE for a cm_id still in CONN_RECV): a peer-to-peer MPA
# initiator that ends the connection before siw has taken its RTR. Three boots of
# the linux-siw-vm guest with a persistent rping server:
#   a) P2P Request, Reply, RTR, close            -> clean
#   b) P2P Request, Reply, close (no RTR)        -> kernel BUG
#   c) gosiw Connect offering only the Send RTR  -> siw proposes Write, gosiw sends
#      Terminate (LLP/MPA 0x07) and closes       -> kernel BUG
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
LAB="${LAB:?set LAB to the directory of the linux-siw-vm lab}"
export LAB_OUT="${LAB_OUT:-/tmp/siw-lab}"
SH="$LAB_OUT/share"; mkdir -p "$SH" "$LAB_OUT/bin"
exec > >(tee "$LAB_OUT/iwcm-bug.txt") 2>&1
(cd "$ROOT" && go build -o "$LAB_OUT/bin/cmlab" ./test/interop/cmlab) || exit 1
CMLAB="$LAB_OUT/bin/cmlab"
for step in "p2p-close -rtr" "p2p-close" "connect -p2p -rtrs send"; do
  rm -f "$SH/READY" "$SH/STOP"
  HOSTFWD="tcp:127.0.0.1:17174-:7174" TIMEOUT=200 QUIET=1 "$LAB/run.sh" "$HERE/guest-rping-persistent.sh" >/dev/null 2>&1 &
  RPID=$!
  for i in $(seq 1 240); do [ "$(cat "$SH/READY" 2>/dev/null)" = persistent ] && break; sleep 0.5; done
  echo "=== \$ cmlab $step -addr 127.0.0.1:17174"
  "$CMLAB" $step -addr 127.0.0.1:17174; echo "rc=$?"
  sleep 3
  echo "\$ cmlab connect -addr 127.0.0.1:17174   (is the guest's rdma_cm still alive?)"
  timeout 20 "$CMLAB" connect -addr 127.0.0.1:17174; echo "rc=$?"
  touch "$SH/STOP"; wait $RPID
  echo "--- guest serial console:"; grep -E "kernel BUG|RIP:" "$LAB_OUT/logs/guest-rping-persistent.log" | head -2 || true
done
