#!/usr/bin/env python3
"""Compiles every ValidatingAdmissionPolicy the chart renders and evaluates it against its
specification, the admission cases of charts/tests/admission_cases.py, as the API server would
(charts/tests/vap.py: real CEL, Kubernetes' bindings and semantics), each case with both CEL
engines (PyPI `cel-python` and `common-expression-language`).

For each values variant CI renders (the defaults, charts/tests/values-all-on.yaml, and the
variants below that change what the policies depend on), with Helm's own engine (render.py):
- every expression of every policy (matchConditions, variables, validations, messageExpression,
  auditAnnotations) compiles, or the run fails with the compiler's message;
- a binding per policy; Deny policies fail closed (failurePolicy Fail);
- podward's FlowSchema matches exactly its ServiceAccounts, ahead of `service-accounts`;
- every case gives its verdict: allowed, denied by the named policy with the named message, or
  warned.

Usage: python3 charts/tests/policies.py [-v]        (exit 0 = every case as specified)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import admission_cases as cases_mod  # noqa: E402
import render  # noqa: E402
import vap  # noqa: E402
import yaml  # noqa: E402

HERE = Path(__file__).resolve().parent
REGISTRY = {"image": {"registry": "registry.example/podward"}}

# name -> values merged over the registry (files first). Each changes what the policies read.
VARIANTS: list[tuple[str, list[str], dict]] = [
    ("defaults", [], {}),
    ("values-all-on", ["values-all-on.yaml"], {}),
    ("renamed", [], {"fullnameOverride": "pw", "serviceAccount": {"name": "pw-node"},
                     "prober": {"kubernetesApi": {"readinessGateCondition": "example.com/ready"}},
                     "nodeLease": {"durationSeconds": 30}}),
    ("no-sentinel", [], {"sentinel": {"enabled": False}}),
    ("no-node-lease", [], {"nodeLease": {"durationSeconds": 0}}),
    ("no-api", [], {"prober": {"kubernetesApi": {"enabled": False}}}),
    ("no-api-priority", [], {"apiPriority": {"enabled": False}}),
]


# Values that would put CEL of the user's choosing into a policy: the values schema refuses them.
INJECTIONS = ["podward.io/ready' || true || '", "x\\' || true", 'a" || true']


def values_of(files: list[str], extra: dict) -> dict:
    values: dict = {}
    render._merge(values, REGISTRY)  # noqa: SLF001
    for f in files:
        render._merge(values, yaml.safe_load((HERE / f).read_text()) or {})  # noqa: SLF001
    return render._merge(values, extra)  # noqa: SLF001


def effective(values: dict) -> dict:
    defaults = yaml.safe_load((HERE.parent / "podward" / "values.yaml").read_text())
    return render._merge(defaults, values)  # noqa: SLF001


def context(objects: list[dict], values: dict) -> vap_ctx:
    v = effective(values)
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    dep = next((o for o in objects if o["kind"] == "Deployment"
                and o["metadata"]["labels"].get("app.kubernetes.io/component") == "sentinel"), None)
    return cases_mod.Ctx(
        namespace="podward-system",
        fullname=ds["metadata"]["name"],
        prober_sa=ds["spec"]["template"]["spec"].get("serviceAccountName", ""),
        sentinel_sa=dep["spec"]["template"]["spec"]["serviceAccountName"] if dep else "",
        gate=v["prober"]["kubernetesApi"]["readinessGateCondition"],
        lease_duration=int(v["nodeLease"]["durationSeconds"]),
    )


vap_ctx = cases_mod.Ctx


def expected_groups(values: dict, ctx) -> list:
    v = effective(values)
    api = v["prober"]["kubernetesApi"]["enabled"]
    groups = []
    if api:
        groups += [cases_mod.prober_pod_cases, cases_mod.prober_event_cases,
                   cases_mod.annotation_cases]
        if int(v["nodeLease"]["durationSeconds"]) > 0:
            groups.append(cases_mod.prober_lease_cases)
        if v["sentinel"]["enabled"]:
            groups += [cases_mod.sentinel_pod_cases, cases_mod.sentinel_event_cases,
                       cases_mod.sentinel_lease_cases]
    return groups


def verdict(policies: list[vap.Policy], req: vap.Request):
    denied, warned = [], []
    for p in policies:
        d = p.admit(req)
        denied += [(p.name, m) for m in d.denied]
        warned += [(p.name, m) for m in d.warnings]
    return denied, warned


def check_case(case, ctx, policies: list[vap.Policy], rendered: set[str]) -> str | None:
    """None when the policies answer as the case says; else what they answered."""
    policy = ctx.fullname + case.policy
    if policy not in rendered:
        return f"policy {policy} is not rendered (or does not compile)"
    denied, warned = verdict(policies, case.request)
    if case.verdict == cases_mod.ALLOW:
        mine = [w for w in warned if w[0] == policy]
        if denied or mine:
            return f"want allowed; denied {denied} warned {mine}"
        return None
    if case.verdict == cases_mod.DENY:
        # A validation's own message; an empty one: the policy failing closed on an error.
        if any(n == policy and (case.message in m and ERROR not in m if case.message
                                else ERROR in m) for n, m in denied):
            return None
        return (f"want denied by {policy} with {case.message!r}; "
                + (f"denied: {denied}" if denied else "allowed"))
    if denied:
        return f"want a warning only; denied {denied}"
    if any(n == policy and case.message in m for n, m in warned):
        return None
    return f"want a warning of {policy} with {case.message!r}; warnings: {warned}"


ERROR = "resulted in error"


def flow_checks(objects: list[dict], ctx, values: dict) -> list[str]:
    """podward's FlowSchema puts exactly its ServiceAccounts on its own priority level, ahead of
    the suggested `service-accounts` schema (9000) that would put them on `workload-low`."""
    v = effective(values)
    fs = [o for o in objects if o["kind"] == "FlowSchema"]
    plc = [o for o in objects if o["kind"] == "PriorityLevelConfiguration"]
    if not v.get("apiPriority", {}).get("enabled", True):
        return [f"apiPriority off but rendered: {[o['kind'] for o in fs + plc]}"] if fs or plc else []
    if len(fs) != 1 or len(plc) != 1:
        return [f"want one FlowSchema and one PriorityLevelConfiguration, got {len(fs)}, {len(plc)}"]
    spec, errors = fs[0]["spec"], []
    if spec["priorityLevelConfiguration"]["name"] != plc[0]["metadata"]["name"]:
        errors.append("the FlowSchema names another priority level")
    if plc[0]["metadata"]["name"] in ("workload-low", "global-default", "catch-all"):
        errors.append("podward's level is one tenants share")
    if not 0 < spec["matchingPrecedence"] < 9000:
        errors.append(f"matchingPrecedence {spec['matchingPrecedence']} does not precede the "
                      f"service-accounts FlowSchema (9000)")
    subjects = sorted(s_["serviceAccount"]["namespace"] + "/" + s_["serviceAccount"]["name"]
                      for r in spec["rules"] for s_ in r["subjects"])
    want = sorted(f"{ctx.namespace}/{sa}" for sa in (ctx.prober_sa, ctx.sentinel_sa) if sa)
    if subjects != want:
        errors.append(f"FlowSchema subjects {subjects}, want podward's ServiceAccounts {want}")
    return errors


def structure(policies: list[vap.Policy]) -> list[str]:
    errors = []
    for p in policies:
        if not p.actions:
            errors.append(f"{p.name}: no ValidatingAdmissionPolicyBinding: it never runs")
        if "Deny" in p.actions and p.failure_policy != "Fail":
            errors.append(f"{p.name}: denies but failurePolicy is {p.failure_policy} (an "
                          f"evaluation error would let the request through)")
    return errors


def main() -> int:
    verbose = "-v" in sys.argv[1:]
    passed = failed = 0
    for name, files, extra in VARIANTS:
        values = values_of(files, extra)
        try:
            objects = render.render(values)["objects"]
        except Exception as e:  # noqa: BLE001  (Helm's error, whatever its type)
            print(f"FAIL {name}: the chart does not render: {e}")
            failed += 1
            continue
        vaps = [o for o in objects if o.get("kind") == "ValidatingAdmissionPolicy"]
        policies, errors = vap.policies(objects)
        exprs = sum(len(p.match_conditions) + len(p.variables) + len(p.validations)
                    + sum(1 for v in p.validations if v[2] is not None)
                    + len(p.audit_annotations) for p in policies)
        print(f"== {name}: {len(vaps)} policies, {len(policies)} compiled ({exprs} expressions)")
        for e in errors + structure(policies):
            print(f"FAIL compile: {e}")
            failed += 1
        if not vaps:
            if effective(values)["prober"]["kubernetesApi"]["enabled"]:
                print("FAIL no ValidatingAdmissionPolicy rendered")
                failed += 1
            continue
        ctx = context(objects, values)
        flow = flow_checks(objects, ctx, values)
        for e in flow:
            print(f"FAIL flowcontrol: {e}")
        failed += len(flow)
        passed += not flow
        rendered = {p.name for p in policies}
        for group in expected_groups(values, ctx):
            for case in group(ctx):
                for engine in vap.ENGINES:
                    vap.ENGINE = engine
                    why = check_case(case, ctx, policies, rendered)
                    if why is None:
                        passed += 1
                        if verbose:
                            print(f"ok   [{engine}] {case.name}")
                    else:
                        failed += 1
                        print(f"FAIL [{engine}] {case.name}: {why}")
    for gate in INJECTIONS:
        values = values_of([], {"prober": {"kubernetesApi": {"readinessGateCondition": gate}}})
        try:
            render.render(values)
        except Exception as e:  # noqa: BLE001  (Helm's error, whatever its type)
            if "readinessGateCondition" in str(e):
                passed += 1
                continue
            print(f"FAIL readinessGateCondition {gate!r}: refused for another reason: {e}")
        else:
            print(f"FAIL readinessGateCondition {gate!r} renders into the policies' CEL")
        failed += 1
    print(f"policies: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
