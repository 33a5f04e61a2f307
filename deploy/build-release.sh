#!/usr/bin/env bash
# Builds podward's release binaries exactly as the container images do (deploy/docker/Dockerfile.*),
# without a container engine: glibc target, statically linked (`-C target-feature=+crt-static`, a
# static-pie ELF). Why not musl: the x86_64-unknown-linux-musl target cannot be installed on machines
# that reach only package registries (rustup downloads it from the Rust servers); a static glibc binary
# needs no libc on the host (the shim runs on any distribution's glibc, old or new) and runs in
# `gcr.io/distroless/static`. The daemons resolve no host names (unix sockets and IP literals), so
# static glibc's NSS limitation does not apply. Where the musl target IS installed, `--musl` uses it.
#
# Usage: deploy/build-release.sh [--package=NAME]... [--out=DIR] [--musl] [--print]
#   --package=NAME  podward-shim | podward-prober | podward-housekeeper (repeatable; default: all three)
#   --out=DIR       copy the binaries to DIR (e.g. the installer payload)
#   --musl          build for x86_64-unknown-linux-musl instead (needs `rustup target add` first)
#   --print         print the cargo command and exit
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
rustflags="-C target-feature=+crt-static"
packages=()
out=""
print=0
for arg in "$@"; do
  case "$arg" in
    --package=*) packages+=("${arg#*=}") ;;
    --out=*) out=${arg#*=} ;;
    --musl) target=x86_64-unknown-linux-musl ;;
    --print) print=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "build-release: unknown argument $arg" >&2; exit 2 ;;
  esac
done
[ "${#packages[@]}" -gt 0 ] || packages=(podward-shim podward-prober podward-housekeeper)

args=(build --release --locked --target "$target")
for p in "${packages[@]}"; do args+=(-p "$p"); done
# With an explicit --target, RUSTFLAGS reach only the target's crates, not build scripts or proc
# macros (which must stay dynamic to be loaded by rustc).
if [ "$print" -eq 1 ]; then
  echo "RUSTFLAGS=\"$rustflags\" cargo ${args[*]}"
  exit 0
fi
RUSTFLAGS="$rustflags" cargo "${args[@]}"

dir="${CARGO_TARGET_DIR:-target}/$target/release"
for p in "${packages[@]}"; do
  bin="$dir/$p"
  # A dynamic binary would not run in distroless/static nor on an older host glibc: refuse it.
  if ldd "$bin" 2>&1 | grep -q '=>'; then
    echo "build-release: $bin is dynamically linked" >&2
    ldd "$bin" >&2
    exit 1
  fi
  echo "build-release: $bin ($(du -h "$bin" | cut -f1), static)"
  if [ -n "$out" ]; then
    mkdir -p "$out"
    install -m 0755 "$bin" "$out/$p"
  fi
done
