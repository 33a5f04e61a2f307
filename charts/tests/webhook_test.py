#!/usr/bin/env python3
"""The takeover webhook's MutatingWebhookConfiguration as the chart renders it (every option on):
which pods the API server sends it, and whether it can reach and trust it.

- Each matchCondition compiles as the API server compiles it and is evaluated by both CEL
  engines of charts/tests/vap.py on pods with and without the opt-in and opt-out annotations:
  the namespace webhook calls for every pod of a takeover namespace except opted-out or
  already-annotated ones; the pod webhook only for opted-in pods elsewhere; the two namespace
  selectors exclude each other (no pod is sent twice), and both exclude kube-system and the
  release's namespace.
- failurePolicy Ignore, sideEffects None, a short timeout, v1 reviews, CREATE of pods only.
- The clientConfig names the chart's Service on 443 and /mutate; the Service's target port is a
  port of the webhook's container; the Secret's serving certificate is signed by the caBundle,
  names the Service's DNS name, and matches its key.

Usage: python3 charts/tests/webhook_test.py       (exit 0 = every check passed)
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vap  # noqa: E402

NAMESPACE = "podward-system"


def render() -> list[dict]:
    out = subprocess.run(
        [sys.executable, str(HERE / "render.py"), "--values", str(HERE / "values-all-on.yaml"),
         "--set-json", json.dumps({"image": {"registry": "registry.example/podward"}})],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["objects"]


def one(objects: list[dict], kind: str, name: str) -> dict:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise SystemExit(f"expected one {kind}/{name}, rendered {len(found)}")
    return found[0]


def pod(annotations: dict | None) -> dict:
    meta: dict = {"generateName": "web-5d8f7-", "namespace": "shop"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "web", "image": "web:1",
                                     "livenessProbe": {"tcpSocket": {"port": 8080}}}]}}


# annotations -> (namespace webhook calls, pod webhook calls)
CASES: list[tuple[str, dict | None, bool, bool]] = [
    ("no annotations", None, True, False),
    ("other annotations", {"team": "a"}, True, False),
    ("opted in", {"podward.io/probes-takeover": "true"}, True, True),
    ("opted out", {"podward.io/probes-takeover": "false"}, False, False),
    ("already annotated", {"podward.io/probes": "{}"}, False, False),
    ("opted in, already annotated",
     {"podward.io/probes-takeover": "true", "podward.io/probes": "{}"}, False, False),
]


def calls(webhook: dict, obj: dict) -> bool:
    """Whether the API server calls `webhook` for `obj` (its matchConditions: all true)."""
    verdicts = []
    for engine, conv, ev in (("cel-python", vap.to_cel, vap.evaluate),
                             ("common-expression-language", lambda v: v, vap.evaluate_rust)):
        activation = {"object": conv(obj), "oldObject": None,
                      "request": conv({"operation": "CREATE", "namespace": "shop"})}
        results = []
        for mc in webhook["matchConditions"]:
            c = vap.compile_expr(mc["expression"], [])
            r = ev(c, activation)
            if not isinstance(r, bool):
                raise AssertionError(f"{webhook['name']}: {mc['name']} errored in {engine}: {r}")
            results.append(r)
        verdicts.append(all(results))
    if verdicts[0] != verdicts[1]:
        raise AssertionError(f"{webhook['name']}: the CEL engines disagree: {verdicts}")
    return verdicts[0]


def selector(webhook: dict) -> dict[str, tuple[str, list[str]]]:
    return {e["key"]: (e["operator"], e["values"])
            for e in webhook["namespaceSelector"]["matchExpressions"]}


def main() -> int:
    objects = render()
    config = one(objects, "MutatingWebhookConfiguration", "podward-admission")
    hooks = {w["name"]: w for w in config["webhooks"]}
    ns_hook = hooks["namespaces.takeover.podward.io"]
    pod_hook = hooks["pods.takeover.podward.io"]
    failures: list[str] = []
    checks = 0

    def check(cond: bool, what: str) -> None:
        nonlocal checks
        checks += 1
        if not cond:
            failures.append(what)

    for name, annotations, want_ns, want_pod in CASES:
        obj = pod(annotations)
        check(calls(ns_hook, obj) == want_ns, f"{name}: namespace webhook calls {want_ns}")
        check(calls(pod_hook, obj) == want_pod, f"{name}: pod webhook calls {want_pod}")
    check(selector(ns_hook)["podward.io/probes"] == ("In", ["takeover"]),
          "namespace webhook: takeover namespaces only")
    check(selector(pod_hook)["podward.io/probes"] == ("NotIn", ["takeover"]),
          "pod webhook: never a takeover namespace (no pod sent twice)")
    for w in hooks.values():
        n = w["name"]
        check(set(selector(w)["kubernetes.io/metadata.name"][1]) >= {NAMESPACE, "kube-system"},
              f"{n}: podward's and the system's namespaces excluded")
        check(selector(w)["kubernetes.io/metadata.name"][0] == "NotIn", f"{n}: NotIn")
        check(w["failurePolicy"] == "Ignore", f"{n}: failurePolicy Ignore")
        check(w["sideEffects"] == "None", f"{n}: sideEffects None")
        check(1 <= w["timeoutSeconds"] <= 5, f"{n}: a short timeout")
        check(w["admissionReviewVersions"] == ["v1"], f"{n}: AdmissionReview v1")
        check(w["reinvocationPolicy"] == "Never", f"{n}: reinvocationPolicy Never")
        check(w["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}],
              f"{n}: pod CREATE only")
        svc_ref = w["clientConfig"]["service"]
        check(svc_ref == {"name": "podward-admission", "namespace": NAMESPACE,
                          "path": "/mutate", "port": 443}, f"{n}: the chart's Service")

    svc = one(objects, "Service", "podward-admission")
    target = next(p["targetPort"] for p in svc["spec"]["ports"] if p["port"] == 443)
    dep = one(objects, "Deployment", "podward-admission")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    check(target in {p["name"] for p in container["ports"]}, "Service 443 -> the webhook port")
    check(svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items(),
          "the Service selects the webhook's pods")

    secret = one(objects, "Secret", "podward-admission-tls")
    ca = x509.load_pem_x509_certificate(base64.b64decode(ns_hook["clientConfig"]["caBundle"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    key = serialization.load_pem_private_key(base64.b64decode(secret["data"]["tls.key"]), None)
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                           cert.signature_hash_algorithm)
    checks += 1
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    check(f"podward-admission.{NAMESPACE}.svc" in sans.get_values_for_type(x509.DNSName),
          "the serving certificate names the Service")
    check(key.public_key().public_numbers() == cert.public_key().public_numbers(),
          "the key matches the certificate")
    check(pod_hook["clientConfig"]["caBundle"] == ns_hook["clientConfig"]["caBundle"],
          "one CA for both webhooks")

    for f in failures:
        print(f"FAIL: {f}")
    print(f"webhook: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
