#!/usr/bin/env python3
"""`helm lint --strict` on charts/podward with the real Helm linter (PyPI `helm-sdkpy`).

helm-sdkpy's Lint action runs Helm's `action.Lint` in-process, but it exposes no `strict` switch. What
`--strict` changes in Helm is only the threshold: with it, every message of severity WARNING or higher
is an error (`lowestTolerance = support.WarningSev` in `pkg/action/lint.go`). This script applies that
threshold to the messages the linter returns, so it fails exactly when `helm lint --strict` would.

Usage: python3 charts/tests/lint.py [CHART_DIR]        (exit 0 = clean)
Install: pip install --ignore-requires-python helm-sdkpy   (Python 3.11; the wheel says 3.12)
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

# Helm's support.Severity values (pkg/lint/support/message.go).
SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}
STRICT_THRESHOLD = 2

CHART = Path(__file__).resolve().parent.parent / "podward"


def _field(obj: dict, *names: str):
    """Helm's Go structs serialise with their Go field names; accept either spelling."""
    for name in names:
        if name in obj:
            return obj[name]
    return None


def _message_text(msg: dict) -> str:
    err = _field(msg, "Err", "err")
    if isinstance(err, dict):
        err = err.get("Error") or err.get("error") or str(err)
    path = _field(msg, "Path", "path") or ""
    return f"{path}: {err}" if path else str(err)


def lint(chart: Path) -> int:
    # The linter needs no cluster: the configuration below is never used to reach one.
    os.environ.setdefault("HELM_DRIVER", "memory")
    import helm_sdkpy  # noqa: PLC0415  (imported after the environment is set)

    config = helm_sdkpy.Configuration(namespace="podward")
    result = asyncio.run(helm_sdkpy.Lint(config).run(str(chart)))
    messages = _field(result, "Messages", "messages") or []
    linted = _field(result, "TotalChartsLinted", "total_charts_linted")
    failures = 0
    for msg in messages:
        sev = int(_field(msg, "Severity", "severity") or 0)
        label = SEVERITY.get(sev, str(sev))
        print(f"[{label}] {_message_text(msg)}")
        if sev >= STRICT_THRESHOLD:
            failures += 1
    # Errors the action itself recorded (a chart that does not load at all lands here).
    for err in _field(result, "Errors", "errors") or []:
        if not messages:
            print(f"[ERROR] {err}")
            failures += 1
    if linted is not None and int(linted) < 1:
        print("[ERROR] no chart was linted")
        failures += 1
    print(f"lint --strict {chart}: {len(messages)} message(s), {failures} at WARNING or above")
    return 1 if failures else 0


def main() -> int:
    chart = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else CHART
    return lint(chart)


if __name__ == "__main__":
    sys.exit(main())
