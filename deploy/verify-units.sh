#!/usr/bin/env bash
# Checks the shim's systemd units with `systemd-analyze verify` (Debian package `systemd`; systemd need
# not be running). verify exits 0 on many mistakes (an unknown key, a bad value: "ignoring"), so any
# line it prints counts as a failure here. It also refuses a unit whose ExecStart binary does not exist:
# the units are checked against --shim-binary (the built binary) or, without it, an executable stub.
#
# Before checking the real units, the script proves the check bites: a copy with an unknown key must
# fail. Usage: deploy/verify-units.sh [--shim-binary=PATH]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
units="$here/systemd"
shim_bin=""
for arg in "$@"; do
  case "$arg" in
    --shim-binary=*) shim_bin=${arg#*=} ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "verify-units: unknown argument $arg" >&2; exit 2 ;;
  esac
done
command -v systemd-analyze >/dev/null || { echo "verify-units: systemd-analyze missing (apt-get install systemd)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$shim_bin" ]; then
  shim_bin="$work/podward-shim-stub"
  printf '#!/bin/sh\nexit 0\n' >"$shim_bin"
  chmod +x "$shim_bin"
fi
[ -x "$shim_bin" ] || { echo "verify-units: $shim_bin is not executable" >&2; exit 1; }

# verify_dir DIR: 0 when systemd-analyze verify is silent and succeeds on DIR's two units.
verify_dir() {
  local dir=$1 out rc=0
  out=$(cd "$dir" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no \
        ./podward-shim.socket ./podward-shim.service 2>&1) || rc=$?
  if [ -n "$out" ]; then printf '%s\n' "$out"; fi
  [ "$rc" -eq 0 ] && [ -z "$out" ]
}

# prepare DIR: copy the units into DIR, pointing ExecStart at the binary under test.
prepare() {
  mkdir -p "$1"
  cp "$units/podward-shim.socket" "$units/podward-shim.service" "$1/"
  sed -i "s#/usr/local/bin/podward-shim#${shim_bin}#" "$1/podward-shim.service"
}

prepare "$work/broken"
sed -i 's/^Restart=always/Restart=always\nRestartSecs=1s/' "$work/broken/podward-shim.service"
if verify_dir "$work/broken" >/dev/null 2>&1; then
  echo "verify-units: FAIL: the check did not reject a unit with an unknown key" >&2
  exit 1
fi
echo "verify-units: self-test ok (a unit with an unknown key is rejected)"

prepare "$work/real"
if ! verify_dir "$work/real"; then
  echo "verify-units: FAIL: systemd-analyze verify reported the problems above" >&2
  exit 1
fi
echo "verify-units: ok ($units/podward-shim.socket, podward-shim.service; ExecStart=$shim_bin)"
