#!/usr/bin/env bash
# Runs every fuzz target of the module for the given time each (default 2m).
set -euo pipefail
t=${1:-2m}
for pkg in $(go list ./...); do
  for f in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== $pkg $f ($t)"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
  done
done
