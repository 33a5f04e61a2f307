#!/usr/bin/env python3
"""Every object the chart renders, validated against the Kubernetes OpenAPI schemas (PyPI
`kubernetes-validate`, strict: an unknown field is an error, as `kubectl apply
--validate=strict` and the API server's strict field validation make it) of every Kubernetes
release the chart supports (Chart.yaml `kubeVersion`) that kubernetes-validate bundles, for each
values variant charts/tests/policies.py renders.

The Prometheus Operator's kinds (ServiceMonitor, PrometheusRule) are CRDs with no schema there:
they are listed as not validated; any other kind without a schema fails the run.

Usage: python3 charts/tests/schema.py        (exit 0 = every object valid for every version)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kubernetes_validate as kv  # noqa: E402
import policies  # noqa: E402
import render  # noqa: E402
import yaml  # noqa: E402

CHART = Path(__file__).resolve().parent.parent / "podward"
CRD_GROUPS = {"monitoring.coreos.com"}


def supported_versions() -> list[str]:
    """The bundled versions within Chart.yaml's kubeVersion (">=X.Y.Z[-0]" only)."""
    constraint = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)\.\d+(-0)?", constraint.strip())
    if not m:
        raise SystemExit(f"schema.py understands kubeVersion '>=X.Y.Z' only, not {constraint!r}")
    floor = (int(m.group(1)), int(m.group(2)))
    bundled = sorted({tuple(int(x) for x in v.split(".")[:2]) for v in kv.utils.all_versions()})
    versions = [f"{a}.{b}.0" for a, b in bundled if (a, b) >= floor]
    if not versions or versions[0] != f"{floor[0]}.{floor[1]}.0":
        raise SystemExit(f"kubernetes-validate bundles no schema for the chart's floor "
                         f"{floor[0]}.{floor[1]} (it has {bundled[0]}..{bundled[-1]})")
    return versions


def errors_of(obj: dict, version: str) -> list[str] | None:
    """Validation errors; None when the kind has no schema."""
    try:
        kv.validate(obj, version, strict=True)
    except kv.SchemaNotFoundError:
        return None
    except kv.ValidationError as e:
        where = "/".join(str(p) for p in e.path)
        return [f"{where}: {e.message}"]
    return []


def self_check(version: str) -> None:
    """The validator is strict: it refuses an unknown field and a wrong type."""
    ok = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}
    for bad in ({**ok, "unknownField": 1}, {**ok, "data": {"a": 1}}):
        if not errors_of(bad, version):
            raise SystemExit(f"kubernetes-validate {version} accepted {bad}: not strict")
    if errors_of(ok, version):
        raise SystemExit(f"kubernetes-validate {version} refused a valid ConfigMap")


def main() -> int:
    versions = supported_versions()
    for v in versions:
        self_check(v)
    print(f"schemas: Kubernetes {', '.join(versions)} (strict)")
    passed = failed = 0
    for name, files, extra in policies.VARIANTS:
        objects = render.render(policies.values_of(files, extra))["objects"]
        skipped = set()
        for obj in objects:
            kind = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
            group = obj.get("apiVersion", "").rpartition("/")[0]
            for version in versions:
                errs = errors_of(obj, version)
                if errs is None:
                    if group in CRD_GROUPS:
                        skipped.add(obj["kind"])
                        continue
                    print(f"FAIL {name}: {kind}: no schema for {obj.get('apiVersion')} in "
                          f"Kubernetes {version}")
                    failed += 1
                elif errs:
                    for e in errs:
                        print(f"FAIL {name}: {kind} (Kubernetes {version}): {e}")
                    failed += 1
                else:
                    passed += 1
        note = f"; not validated (CRDs): {sorted(skipped)}" if skipped else ""
        print(f"== {name}: {len(objects)} objects{note}")
    print(f"schema: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
