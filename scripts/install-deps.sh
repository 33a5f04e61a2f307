#!/usr/bin/env bash
# Installs what podward's build, tests and demo need on a fresh Debian 12 machine (as root).
# Idempotent: packages already present are not reinstalled; apt is only updated when something is missing.
set -euo pipefail

APT_PACKAGES=(
  containerd runc             # the runtime podward sits beside (e2e and demo)
  busybox-static              # test images are built from it
  protobuf-compiler           # protoc, for k8s-cri / containerd-client / podward protos
  gcc libc6-dev               # builds the tiny static pause binary
  libseccomp-dev              # the prober's direct exec compiles seccomp profiles with libseccomp,
                              # linked statically from its libseccomp.a (.cargo/config.toml)
  libssl-dev pkg-config       # OpenSSL: the prober redoes as Go's client an HTTPS handshake whose
                              # certificate chain passes rustls' 64 KiB cap; linked statically from
                              # libssl.a and libcrypto.a (.cargo/config.toml)
  iproute2 util-linux         # ip, mount/umount, nsenter for tests
  containernetworking-plugins # bridge + host-local CNI for pod-network sandboxes in e2e
  docker-registry skopeo      # loopback registry so CRI PullImage is exercised
  buildah                     # builds the container images (deploy/build-images.sh) without a daemon
  systemd                     # systemd-analyze verify for the shim's units; a private systemd --user
                              # manager for the housekeeper's systemd-driver tests (not as PID 1)
  dbus-daemon                 # that manager's own bus
  socat                       # the plain byte relay the shim benchmark compares against
  prometheus                  # promtool: the chart's alerts tested against synthetic series
                              # (charts/tests/alerts.py)
  golang-go golang-google-grpc-dev golang-google-protobuf-dev protoc-gen-go protoc-gen-go-grpc
  golang-github-golang-protobuf-1-5-dev
                              # a grpc-go CRI client (kubelet's stack) for the shim's e2e, built
                              # offline; protobuf 1.5 (not 1.3): grpc's codec must take the
                              # APIv2 messages that protoc-gen-go generates
)
# grpcio: a gRPC health server nobody here wrote, and a C-core CRI client (shim e2e);
# grpcio-tools: its CRI stubs from the k8s-cri crate's v1.proto.
PIP_PACKAGES=(grpcio grpcio-health-checking grpcio-tools)

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: must run as root (containerd, cgroups and mounts need it)" >&2
  exit 1
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The static archive the prober links (LIBSECCOMP_LINK_TYPE=static, LIBSECCOMP_LIB_PATH in
# .cargo/config.toml: the multiarch directory, unless the environment names another).
seccomp_dir=${LIBSECCOMP_LIB_PATH:-/usr/lib/$(uname -m)-linux-gnu}
if [ ! -f "$seccomp_dir/libseccomp.a" ]; then
  echo "install-deps: $seccomp_dir/libseccomp.a missing (libseccomp-dev; set LIBSECCOMP_LIB_PATH)" >&2
  exit 1
fi

# The static OpenSSL archives the prober links (OPENSSL_STATIC, OPENSSL_LIB_DIR in
# .cargo/config.toml: the multiarch directory, unless the environment names another).
ssl_dir=${OPENSSL_LIB_DIR:-/usr/lib/$(uname -m)-linux-gnu}
for a in libssl.a libcrypto.a; do
  if [ ! -f "$ssl_dir/$a" ]; then
    echo "install-deps: $ssl_dir/$a missing (libssl-dev; set OPENSSL_LIB_DIR)" >&2
    exit 1
  fi
done

py=python3
if ! "$py" -c 'import grpc_health.v1, grpc_tools.protoc' 2>/dev/null; then
  echo "install-deps: pip installing ${PIP_PACKAGES[*]}"
  "$py" -m pip install -q "${PIP_PACKAGES[@]}"
fi

# helm-sdkpy carries the real Helm library (chart lint and render tests); it says Python 3.12 but works
# on 3.11. PyYAML reads the rendered manifests.
if ! "$py" -c 'import helm_sdkpy, yaml' 2>/dev/null; then
  echo "install-deps: pip installing helm-sdkpy pyyaml"
  "$py" -m pip install -q --ignore-requires-python helm-sdkpy pyyaml
fi

# cel-python (module celpy) and common-expression-language (module cel, Rust's cel crate): two
# CEL implementations for the chart's admission policies (charts/tests/policies.py);
# kubernetes-validate: the Kubernetes OpenAPI schemas of each release (charts/tests/schema.py).
if ! "$py" -c 'import celpy, cel, kubernetes_validate' 2>/dev/null; then
  echo "install-deps: pip installing cel-python common-expression-language kubernetes-validate"
  "$py" -m pip install -q cel-python common-expression-language kubernetes-validate
fi

if ! command -v cargo-nextest >/dev/null 2>&1 && ! cargo nextest --version >/dev/null 2>&1; then
  echo "install-deps: cargo-nextest missing; installing from crates.io"
  cargo install --locked cargo-nextest
fi
echo "install-deps: ok"
