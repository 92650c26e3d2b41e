#!/usr/bin/env bash
# Runs every fuzz target of the module (go test -list '^Fuzz' finds them,
# among them rdmap FuzzEngine and cm FuzzListener / FuzzConnectReply), one
# at a time, for the given time each (default 2m). FUZZ, a regular
# expression, limits the targets (FUZZ=Engine). One worker each
# (FUZZPARALLEL to change): the engine and cm targets run real loopback
# connections and are meant to share a small machine. Inputs that
# fail are written to the package's testdata/fuzz/<target>/.
set -euo pipefail
t=${1:-2m}
only=${FUZZ:-.}
par=${FUZZPARALLEL:-1}
for pkg in $(go list ./...); do
  for f in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' | grep -E -- "$only" || true); do
    echo "== $pkg $f ($t)"
    # -timeout 0: the default 10m test timeout would end a long run.
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" -fuzzminimizetime 10s -parallel "$par" -timeout 0 "$pkg"
  done
done
