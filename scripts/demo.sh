#!/usr/bin/env bash
# Runs podward for real: a private containerd, the three daemons, the Kubernetes API server
# stand-in, a demo pod with probes and a readiness gate, and an orphan for the housekeeper.
# Ctrl-C stops it and removes everything it created. `--seconds N` stops after N seconds, `--act`
# lets the housekeeper clean the orphan, `--verbose` shows the daemons' logs; `--help` lists all.
# Uses the debug build the test command also makes (a release build of the whole workspace takes
# many minutes on a small machine; `deploy/build-release.sh` makes the release binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cargo build --bins
exec ./target/debug/podward-demo "$@"
