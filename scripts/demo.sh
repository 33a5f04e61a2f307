#!/usr/bin/env bash
# Runs podward for real: a private containerd, the three daemons, and a demo pod with probes.
# Ctrl-C stops it and removes everything it created. Pass `--seconds N` to stop after N seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cargo build --release --bins
exec ./target/release/podward-demo "$@"
