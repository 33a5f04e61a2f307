#!/usr/bin/env bash
# Builds podward's container images with buildah: no container daemon, and no base image to pull
# (every image is FROM scratch; the shim installer's shell is Debian's static busybox).
#
#   <registry>/podward-prober:<tag>           deploy/docker/Dockerfile.prober
#   <registry>/podward-housekeeper:<tag>      deploy/docker/Dockerfile.housekeeper
#   <registry>/podward-shim-installer:<tag>   deploy/docker/Dockerfile.shim-installer
#
# These are the names the chart pulls (values.yaml: image.registry + <daemon>.image.repository,
# tag = the chart's appVersion unless image.tag says otherwise).
#
# Usage: deploy/build-images.sh [OPTIONS]
#   --registry=REG       name prefix, e.g. registry.example.com/podward  [default: localhost/podward]
#   --tag=TAG            image tag                            [default: appVersion in Chart.yaml]
#   --arch=ARCH          amd64 | arm64 (the node label kubernetes.io/arch) [default: this machine's]
#   --bin-dir=DIR        take the binaries from DIR instead of building them with
#                        deploy/build-release.sh (e.g. target/debug in tests). A dynamically linked
#                        binary (a debug build) gets the shared libraries `ldd` lists, copied from
#                        this machine: only for images of this machine's architecture.
#   --image=NAME         build only NAME (repeatable)                        [default: all three]
#   --busybox=FILE       static busybox for the installer image  [default: /bin/busybox, Debian's
#                        busybox-static; for another --arch, that architecture's busybox]
#   --push               push each image to docker://<registry>/<name>:<tag> after building it
#   --tls-verify=BOOL    TLS verification for --push (false for a plain-HTTP registry) [default: true]
#   --storage-root=DIR   buildah's image store (its --root; --runroot is DIR/run) [default: buildah's]
#   --print-names        print the image references that would be built, one per line, and exit
#   -h, --help           this help
#
# Storage is vfs and isolation chroot: both work as root without kernel overlay support or a
# container runtime daemon, in CI and inside containers.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_IMAGES=(podward-prober podward-housekeeper podward-shim-installer)
# The commands deploy/install-shim.sh runs, as busybox applets in the installer image.
INSTALLER_APPLETS=(sh cat chmod cmp cp dirname echo install mkdir mv rm ls)

die() { echo "build-images: $*" >&2; exit 1; }

host_arch() {
  case "$(uname -m)" in
    x86_64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    *) uname -m ;;
  esac
}

# readelf's "Machine" for a Kubernetes architecture name.
elf_machine() {
  case "$1" in
    amd64) echo "X86-64" ;;
    arm64) echo "AArch64" ;;
  esac
}

registry=localhost/podward
tag=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/podward/Chart.yaml)
arch=$(host_arch)
bin_dir=""
images=()
busybox=/bin/busybox
push=0
tls_verify=true
storage_root=""
print_names=0
for arg in "$@"; do
  case "$arg" in
    --registry=*) registry=${arg#*=} ;;
    --tag=*) tag=${arg#*=} ;;
    --arch=*) arch=${arg#*=} ;;
    --bin-dir=*) bin_dir=${arg#*=} ;;
    --image=*) images+=("${arg#*=}") ;;
    --busybox=*) busybox=${arg#*=} ;;
    --push) push=1 ;;
    --tls-verify=*) tls_verify=${arg#*=} ;;
    --storage-root=*) storage_root=${arg#*=} ;;
    --print-names) print_names=1 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "build-images: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
[ "${#images[@]}" -gt 0 ] || images=("${ALL_IMAGES[@]}")
[ -n "$tag" ] || die "no --tag and no appVersion in charts/podward/Chart.yaml"
registry=${registry%/}
case "$arch" in amd64 | arm64) ;; *) die "unsupported --arch=$arch (amd64 or arm64)" ;; esac
for image in "${images[@]}"; do
  case " ${ALL_IMAGES[*]} " in *" $image "*) ;; *) die "unknown --image=$image (${ALL_IMAGES[*]})" ;; esac
done
case "$tls_verify" in true | false) ;; *) die "--tls-verify takes true or false" ;; esac

if [ "$print_names" -eq 1 ]; then
  for image in "${images[@]}"; do echo "$registry/$image:$tag $arch"; done
  exit 0
fi

command -v buildah >/dev/null || die "buildah is not installed (apt-get install buildah)"
buildah=(buildah --storage-driver vfs)
if [ -n "$storage_root" ]; then
  buildah+=(--root "$storage_root" --runroot "$storage_root/run")
fi
revision=${PODWARD_BUILD_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}

stage=$(mktemp -d "${TMPDIR:-/tmp}/podward-images.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# The three binaries, in $stage/bin.
if [ -z "$bin_dir" ]; then
  PODWARD_BUILD_REVISION=$revision deploy/build-release.sh --arch="$arch" --out="$stage/bin"
else
  mkdir -p "$stage/bin"
  for p in podward-shim podward-prober podward-housekeeper; do
    [ -x "$bin_dir/$p" ] || die "$bin_dir/$p is missing (cargo build --bins)"
    cp "$bin_dir/$p" "$stage/bin/$p"
  done
fi

is_dynamic() { LC_ALL=C readelf -d "$1" 2>/dev/null | grep -q '(NEEDED)'; }

check_machine() {
  local want got
  want=$(elf_machine "$arch")
  got=$(LC_ALL=C readelf -h "$1" | sed -n 's/^ *Machine: *//p')
  case "$got" in *"$want"*) ;; *) die "$1 is built for '$got', not $arch ($want)" ;; esac
}

# Copies binary $1 to $2/$3 (path inside the root), without its debug sections (a backtrace
# keeps its symbols), plus, when it is dynamically linked, the shared libraries and loader it
# needs at the paths it looks for them.
stage_binary() {
  local src=$1 root=$2 path=$3 lib
  check_machine "$src"
  install -D -m 0755 "$src" "$root$path"
  objcopy --strip-debug "$root$path"
  if is_dynamic "$src"; then
    [ "$arch" = "$(host_arch)" ] || die "$src is dynamically linked; only static binaries can be packed for $arch"
    echo "build-images: $(basename "$src") is dynamically linked (a test build): adding its libraries" >&2
    for lib in $(ldd "$src" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
      [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
    done
  fi
}

build() {
  local image=$1 context=$2 file=$3 ref="$registry/$1:$tag"
  "${buildah[@]}" build --quiet --isolation chroot --arch "$arch" --os linux \
    --build-arg VERSION="$tag" --build-arg REVISION="$revision" \
    -f "$file" -t "$ref" "$context" >/dev/null
  echo "build-images: built $ref ($arch)"
  if [ "$push" -eq 1 ]; then
    "${buildah[@]}" push --quiet --tls-verify="$tls_verify" "$ref" "docker://$ref"
    echo "build-images: pushed $ref"
  fi
}

for image in "${images[@]}"; do
  ctx="$stage/$image"
  root="$ctx/rootfs"
  mkdir -p "$root"
  case "$image" in
    podward-prober | podward-housekeeper)
      stage_binary "$stage/bin/$image" "$root" "/usr/local/bin/$image"
      build "$image" "$ctx" "deploy/docker/Dockerfile.${image#podward-}"
      ;;
    podward-shim-installer)
      is_dynamic "$stage/bin/podward-shim" &&
        echo "build-images: WARNING: the installer carries a dynamically linked podward-shim; it runs only on hosts with this machine's glibc (fine for tests, not for release)" >&2
      stage_binary "$stage/bin/podward-shim" "$root" /opt/podward/podward-shim
      install -D -m 0755 deploy/install-shim.sh "$root/opt/podward/install-shim.sh"
      install -D -m 0644 deploy/systemd/podward-shim.socket "$root/opt/podward/systemd/podward-shim.socket"
      install -D -m 0644 deploy/systemd/podward-shim.service "$root/opt/podward/systemd/podward-shim.service"
      [ -x "$busybox" ] || die "$busybox is missing (apt-get install busybox-static)"
      is_dynamic "$busybox" && die "$busybox is dynamically linked; the installer needs a static busybox (busybox-static)"
      check_machine "$busybox"
      install -D -m 0755 "$busybox" "$root/bin/busybox"
      for applet in "${INSTALLER_APPLETS[@]}"; do ln -s busybox "$root/bin/$applet"; done
      build "$image" "$ctx" deploy/docker/Dockerfile.shim-installer
      ;;
  esac
done
