#!/usr/bin/env bash
# make stress: the race suite under conditions that shake out timing bugs.
#
#   STRESS=full (default, make stress):
#     1. go test -race -count=3 ./...  with GOMAXPROCS=1
#     2. go test -race -count=3 ./...  beside a CPU hog (one busy loop per
#        core, started and stopped by this script)
#     3. go test -count=3 ./test/e2e   beside the hog (the real binaries)
#   STRESS=ci (.ci/run): go test -race -count=1 of the packages most prone
#     to timing trouble, beside the hog; well under 10 minutes.
#
# Every phase runs even when an earlier one failed; the summary lists the
# failed tests of each phase and the script exits non-zero if any failed.
# The hog is a shell loop per core under `timeout` (a hard limit, so a
# killed script cannot leave it spinning), stopped by PID on exit.
# Environment: STRESS (full|ci), COUNT (default 3; ci: 1), PKGS (default
# ./... ; ci: the timing-prone packages), HOG_LIMIT (seconds, default
# 3600), TIMEOUT (go test -timeout, default 30m).
set -uo pipefail
cd "$(dirname "$0")/.."

mode=${STRESS:-full}
hog_limit=${HOG_LIMIT:-3600}
gotimeout=${TIMEOUT:-30m}
case "$mode" in
full)
  count=${COUNT:-3}
  pkgs=${PKGS:-./...}
  ;;
ci)
  count=${COUNT:-1}
  pkgs=${PKGS:-./rdmap ./cm ./internal/rping ./internal/perf ./internal/daemon ./test/e2e}
  ;;
*)
  echo "stress: unknown STRESS=$mode (full or ci)" >&2
  exit 2
  ;;
esac

logdir=$(mktemp -d "${TMPDIR:-/tmp}/gosiw-stress.XXXXXX")
hog_pids=()

hog_start() {
  local n
  n=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
  for _ in $(seq 1 "$n"); do
    timeout "$hog_limit" sh -c 'while :; do :; done' &
    hog_pids+=($!)
  done
  echo "[stress] CPU hog: ${#hog_pids[@]} busy loops (pids ${hog_pids[*]}), at most ${hog_limit}s"
}

hog_stop() {
  local p
  for p in "${hog_pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${hog_pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  hog_pids=()
}
trap hog_stop EXIT
trap 'hog_stop; exit 130' INT TERM

failed=0
summary=()

# phase NAME CMD...: runs CMD, keeps its output in the log directory,
# records the failed tests.
phase() {
  local name=$1
  shift
  local log="$logdir/$name.log" start rc
  start=$(date +%s)
  echo "[stress] $name: $*"
  "$@" >"$log" 2>&1
  rc=$?
  local secs=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then
    summary+=("PASS $name (${secs}s)")
  else
    failed=1
    summary+=("FAIL $name (${secs}s, exit $rc, log $log)")
    while IFS= read -r line; do
      summary+=("     $line")
    done < <(grep -E '^(--- FAIL|FAIL|panic:|fatal error:)' "$log" | sort | uniq -c | sed 's/^ *//' | head -40)
  fi
  echo "[stress] $name: exit $rc after ${secs}s"
}

# shellcheck disable=SC2086 # pkgs is a list
case "$mode" in
full)
  phase gomaxprocs1 env GOMAXPROCS=1 go test -race -count="$count" -timeout "$gotimeout" $pkgs
  hog_start
  phase hog go test -race -count="$count" -timeout "$gotimeout" $pkgs
  phase hog-e2e go test -count="$count" -timeout "$gotimeout" ./test/e2e
  hog_stop
  ;;
ci)
  hog_start
  phase ci-hog go test -race -count="$count" -timeout "$gotimeout" $pkgs
  hog_stop
  ;;
esac

echo "[stress] summary ($mode, logs in $logdir):"
printf '  %s\n' "${summary[@]}"
exit "$failed"
