#!/usr/bin/env bash
# make demo: build siw and siwd, start siwd on loopback, run siw ping and a
# short siw perf against it, show what siwd counted, stop it with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
mkdir -p "$BIN"
echo "== building siw and siwd"
go build -o "$BIN/siw" ./cmd/siw
go build -o "$BIN/siwd" ./cmd/siwd

LOG=$(mktemp)
OUT=$(mktemp)
"$BIN/siwd" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --region name=scratch,size=16MiB,access=rw >"$OUT" 2>"$LOG" &
SIWD=$!
cleanup() { kill "$SIWD" 2>/dev/null || true; rm -f "$LOG" "$OUT"; }
trap cleanup EXIT
for _ in $(seq 1 100); do
  grep -q '^siwd metrics on' "$OUT" && break
  sleep 0.1
done
ADDR=$(sed -n 's/^siwd listening on //p' "$OUT")
METRICS=$(sed -n 's/^siwd metrics on //p' "$OUT")
[ -n "$ADDR" ] || { echo "siwd did not start:"; cat "$LOG"; exit 1; }
HOST=${ADDR%:*}; PORT=${ADDR##*:}
echo "== siwd (pid $SIWD) listening on $ADDR, metrics at $METRICS"

echo; echo "== siw ping -c -a $HOST -p $PORT -S 64 -C 3 -v -V   (rping-compatible)"
"$BIN/siw" ping -c -a "$HOST" -p "$PORT" -S 64 -C 3 -v -V

echo; echo "== siw perf write -t 2s -l 1M $ADDR"
"$BIN/siw" perf write -t 2s -l 1M "$ADDR"

echo; echo "== siw perf send --pingpong -t 1s $ADDR"
"$BIN/siw" perf send --pingpong -t 1s "$ADDR"

echo; echo "== what siwd counted (from $METRICS)"
MHP=${METRICS#http://}; MHP=${MHP%%/*}
exec 3<>"/dev/tcp/${MHP%:*}/${MHP##*:}"
printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$MHP" >&3
grep -E '^siwd_(handshakes|operations|bytes)_total' <&3 || true
exec 3<&-

echo; echo "== stopping siwd with SIGTERM"
kill -TERM "$SIWD"
wait "$SIWD"; rc=$?
echo "siwd exited with status $rc"
trap - EXIT
rm -f "$LOG" "$OUT"
