#!/usr/bin/env bash
# make install into a temporary DESTDIR (default PREFIX, then a custom one)
# and check that the binaries, the unit and the config land where the unit
# expects them, and that the installed binaries run.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
fail() { echo "install-check: $*" >&2; exit 1; }

check() { # check DESTDIR PREFIX SYSCONFDIR UNITDIR
  local d=$1 prefix=$2 etc=$3 unitdir=$4
  for f in "$prefix/bin/siw" "$prefix/bin/siwd"; do
    [ -x "$d$f" ] || fail "$f not installed (or not executable)"
  done
  [ -f "$d$unitdir/siwd.service" ] || fail "$unitdir/siwd.service not installed"
  [ -f "$d$etc/gosiw/siwd.toml" ] || fail "$etc/gosiw/siwd.toml not installed"
  cmp -s LICENSE "$d$prefix/share/doc/gosiw/LICENSE" || fail "$prefix/share/doc/gosiw/LICENSE not installed"
  exec_start=$(sed -n 's/^ExecStart=//p' "$d$unitdir/siwd.service")
  bin=${exec_start%% *}
  [ "$bin" = "$prefix/bin/siwd" ] || fail "unit runs $bin, installed $prefix/bin/siwd"
  conf=$(sed -n 's/.*--config \([^ ]*\).*/\1/p' <<<"$exec_start")
  [ "$conf" = "$etc/gosiw/siwd.toml" ] || fail "unit reads $conf, installed $etc/gosiw/siwd.toml"
  "$d$prefix/bin/siwd" --version | grep -q '^siwd ' || fail "installed siwd --version"
  "$d$prefix/bin/siw" --version | grep -q '^siw ' || fail "installed siw --version"
  if command -v systemd-analyze >/dev/null 2>&1; then
    systemd-analyze security --offline=yes --threshold=30 "$d$unitdir/siwd.service" >/dev/null ||
      fail "$unitdir/siwd.service: systemd-analyze security rates it above 3.0"
  fi
}

make -s install DESTDIR="$dest/a"
check "$dest/a" /usr/local /etc /usr/local/lib/systemd/system
make -s install DESTDIR="$dest/b" PREFIX=/opt/gosiw SYSCONFDIR=/opt/gosiw/etc
check "$dest/b" /opt/gosiw /opt/gosiw/etc /opt/gosiw/lib/systemd/system
# A second install keeps a config the admin edited.
echo '# edited' >>"$dest/a/etc/gosiw/siwd.toml"
make -s install DESTDIR="$dest/a"
tail -1 "$dest/a/etc/gosiw/siwd.toml" | grep -q '^# edited$' || fail "make install overwrote an existing config"
echo "install-check: ok ($("$dest/a/usr/local/bin/siwd" --version))"
