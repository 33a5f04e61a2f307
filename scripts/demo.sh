#!/usr/bin/env bash
# Runs podward for real: a private containerd, the three daemons, and a demo pod with probes.
# Ctrl-C stops it and removes everything it created. Pass `--seconds N` to stop after N seconds.
# Uses the debug build the test command also makes (a release build of the whole workspace takes
# many minutes on a small machine; `deploy/build-release.sh` makes the release binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cargo build --bins
exec ./target/debug/podward-demo "$@"
