#!/usr/bin/env bash
# Builds podward's release binaries, the ones the container images carry (deploy/build-images.sh):
# glibc target, statically linked (`-C target-feature=+crt-static`, a static-pie ELF). Why not musl:
# the *-unknown-linux-musl targets cannot be installed on machines that reach only package
# registries (rustup downloads them from the Rust servers); a static glibc binary needs no libc on
# the host (the shim runs on any distribution's glibc, old or new) and runs in a `FROM scratch`
# image. Static glibc loads no NSS modules, but glibc 2.34 and later carry the `files` and `dns`
# lookups inside libc itself, so the prober's probe host names (getaddrinfo, /etc/hosts and
# resolv.conf) resolve in a static binary with no library beside it. Where the musl target IS
# installed, `--musl` uses it.
#
# Usage: deploy/build-release.sh [--package=NAME]... [--arch=ARCH] [--out=DIR] [--musl] [--print]
#   --package=NAME  podward-shim | podward-prober | podward-housekeeper (repeatable; default: all three)
#   --arch=ARCH     amd64 | arm64, in Kubernetes' spelling (the node label kubernetes.io/arch);
#                   default: this machine's. Another architecture needs its Rust target
#                   (`rustup target add aarch64-unknown-linux-gnu`) and a linker for it
#                   (CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc).
#   --out=DIR       copy the binaries to DIR (e.g. an image's build context)
#   --musl          build for <arch>-unknown-linux-musl instead (needs `rustup target add` first)
#   --print         print the cargo command and exit
# PODWARD_BUILD_REVISION (default: `git rev-parse --short=12 HEAD`) becomes the `revision` label of
# every daemon's podward_<daemon>_build_info metric.
set -euo pipefail
cd "$(dirname "$0")/.."

host_arch() {
  case "$(uname -m)" in
    x86_64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    *) uname -m ;;
  esac
}

arch=$(host_arch)
libc=gnu
rustflags="-C target-feature=+crt-static"
packages=()
out=""
print=0
for arg in "$@"; do
  case "$arg" in
    --package=*) packages+=("${arg#*=}") ;;
    --arch=*) arch=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    --musl) libc=musl ;;
    --print) print=1 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "build-release: unknown argument $arg" >&2; exit 2 ;;
  esac
done
case "$arch" in
  amd64) target="x86_64-unknown-linux-$libc" ;;
  arm64) target="aarch64-unknown-linux-$libc" ;;
  *) echo "build-release: unsupported --arch=$arch (amd64 or arm64)" >&2; exit 2 ;;
esac
[ "${#packages[@]}" -gt 0 ] || packages=(podward-shim podward-prober podward-housekeeper)

args=(build --release --locked --target "$target")
for p in "${packages[@]}"; do args+=(-p "$p"); done
# With an explicit --target, RUSTFLAGS reach only the target's crates, not build scripts or proc
# macros (which must stay dynamic to be loaded by rustc).
if [ "$print" -eq 1 ]; then
  echo "RUSTFLAGS=\"$rustflags\" cargo ${args[*]}"
  exit 0
fi
if [ -z "${PODWARD_BUILD_REVISION:-}" ]; then
  PODWARD_BUILD_REVISION=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
fi
export PODWARD_BUILD_REVISION
RUSTFLAGS="$rustflags" cargo "${args[@]}"

dir="${CARGO_TARGET_DIR:-target}/$target/release"
for p in "${packages[@]}"; do
  bin="$dir/$p"
  # A dynamic binary would not run in a FROM scratch image nor on an older host glibc: refuse it.
  # (readelf, not ldd: ldd cannot inspect a binary of another architecture.)
  if LC_ALL=C readelf -d "$bin" 2>/dev/null | grep -q '(NEEDED)'; then
    echo "build-release: $bin is dynamically linked" >&2
    LC_ALL=C readelf -d "$bin" | grep NEEDED >&2
    exit 1
  fi
  echo "build-release: $bin ($(du -h "$bin" | cut -f1), static, $arch)"
  if [ -n "$out" ]; then
    mkdir -p "$out"
    install -m 0755 "$bin" "$out/$p"
  fi
done
