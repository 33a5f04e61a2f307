#!/usr/bin/env python3
"""The chart's alerts against synthetic series with Prometheus's own rule engine (`promtool`).

Renders charts/podward with every option on (render.py, Helm's engine), takes the PrometheusRule's
`spec.groups` as a plain rules file, checks it (`promtool check rules`), then runs
`promtool test rules charts/tests/alerts.test.yaml` against it: every alert of the chart is fired by
a series that should fire it and stays silent for one that should not. An alert of the chart that
the test file never names fails this script, so a new alert cannot ship untested; so does one that
the healthy-install group (every series of a healthy node and sentinel) does not expect silent.

Usage: python3 charts/tests/alerts.py           (exit 0 = every test passed)
Needs: promtool (Debian's `prometheus` package; scripts/install-deps.sh installs it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
TESTS = HERE / "alerts.test.yaml"


def rendered_groups() -> list[dict]:
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "render.py"),
            "--values",
            str(HERE / "values-all-on.yaml"),
            "--set-json",
            json.dumps({"image": {"registry": "registry.example/podward"}}),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rules = [o for o in json.loads(out)["objects"] if o["kind"] == "PrometheusRule"]
    if len(rules) != 1:
        raise SystemExit(f"expected one PrometheusRule, rendered {len(rules)}")
    return rules[0]["spec"]["groups"]


def healthy_silent(tests: dict) -> set[str]:
    """The alerts that the healthy-install test group (the one whose series include a node's
    `podward_prober_lease_healthy` of 1 and a sentinel leader) expects silent at every eval time:
    the group that says a healthy install raises nothing."""
    silent: set[str] = set()
    for t in tests["tests"]:
        series = " ".join(s["series"] for s in t.get("input_series", []))
        if "podward_prober_lease_healthy" not in series or "podward_sentinel_leader" not in series:
            continue
        checks = t.get("alert_rule_test", [])
        loud = {a["alertname"] for a in checks if a.get("exp_alerts")}
        silent |= {a["alertname"] for a in checks} - loud
    return silent


def main() -> int:
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool not found: apt-get install prometheus (scripts/install-deps.sh)")
        return 1
    groups = rendered_groups()
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(TESTS.read_text())
    tested = {
        a["alertname"] for t in tests["tests"] for a in t.get("alert_rule_test", [])
    }
    untested = sorted(alerts - tested)
    unknown = sorted(tested - alerts)
    if untested or unknown:
        print(f"alerts without a test: {untested}; tests of no alert: {unknown}")
        return 1
    not_silent = sorted(alerts - healthy_silent(tests))
    if not_silent:
        print(f"alerts the healthy-install test does not expect silent: {not_silent}")
        return 1
    with tempfile.TemporaryDirectory() as d:
        # Checked with their annotations (templates must parse), tested without them (prose).
        checked = Path(d) / "checked.yaml"
        checked.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        for g in groups:
            for r in g["rules"]:
                r.pop("annotations", None)
        rules = Path(d) / "rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        shutil.copy(TESTS, Path(d) / TESTS.name)
        for args in (["check", "rules", str(checked)], ["test", "rules", TESTS.name]):
            r = subprocess.run([promtool, *args], cwd=d, capture_output=True, text=True)
            print(r.stdout, end="")
            print(r.stderr, end="", file=sys.stderr)
            if r.returncode != 0:
                return r.returncode
    print(f"promtool: {len(alerts)} alerts fired and silenced as tested")
    return 0


if __name__ == "__main__":
    sys.exit(main())
