#!/usr/bin/env bash
# The test command: installs what is missing, builds the three daemons once, then runs every test
# (unit, real-cgroup/real-mount, and e2e on a real containerd the harness starts per test).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cargo build --workspace --bins
exec cargo nextest run --workspace --profile ci "$@"
