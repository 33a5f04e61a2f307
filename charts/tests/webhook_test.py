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
- Upgrade (the install's Secret fed to the chart's `lookup`): the CA is kept byte for byte and
  the caBundle with it, the serving certificate and key are new and signed by that CA; a Secret
  without the CA key gets a new CA.
- cert-manager (with a given issuer, and with none: a self-signed CA Issuer of the chart's
  own): Certificates and Issuers, the cainjector annotation instead of a caBundle, no Secret of
  the chart's, the Certificate's Secret mounted by the webhook.

Usage: python3 charts/tests/webhook_test.py       (exit 0 = every check passed)
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vap  # noqa: E402

NAMESPACE = "podward-system"


def render(admission: dict | None = None, existing: list[dict] | None = None) -> list[dict]:
    """The chart with every option on (and `admission` values over them); `existing`: the
    objects an earlier release left, as Helm's `lookup` finds them on an upgrade."""
    values = {"image": {"registry": "registry.example/podward"}}
    if admission:
        values["admission"] = admission
    args = [sys.executable, str(HERE / "render.py"), "--values", str(HERE / "values-all-on.yaml"),
            "--set-json", json.dumps(values)]
    if existing is not None:
        args += ["--existing", json.dumps(existing)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
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


def pem(secret: dict, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def signed_by(ca: x509.Certificate, cert: x509.Certificate) -> bool:
    try:
        ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                               cert.signature_hash_algorithm)
    except InvalidSignature:
        return False
    return True


def owned(obj: dict) -> dict:
    """`obj` as the API server holds it after an install of release podward: Helm's ownership
    marks, so that an upgrade takes it over instead of refusing it."""
    obj = json.loads(json.dumps(obj))
    meta = obj["metadata"]
    meta.setdefault("labels", {})["app.kubernetes.io/managed-by"] = "Helm"
    meta["annotations"] = {"meta.helm.sh/release-name": "podward",
                           "meta.helm.sh/release-namespace": NAMESPACE}
    meta.update({"uid": "0a0a0a0a-0000-4000-8000-00000000000a", "resourceVersion": "7"})
    return obj


def tls_on_upgrade(installed: dict, ns_hook: dict, check) -> None:
    """An upgrade finds the install's Secret: the CA (certificate and key) is kept byte for byte,
    so the caBundle the API server holds stays valid while the new serving certificate rolls
    out; the serving certificate and key are issued anew, by that CA."""
    objects = render(existing=[owned(installed)])
    secret = one(objects, "Secret", "podward-admission-tls")
    config = one(objects, "MutatingWebhookConfiguration", "podward-admission")
    check(pem(secret, "ca.crt") == pem(installed, "ca.crt"), "upgrade: the CA certificate is kept")
    check(pem(secret, "ca.key") == pem(installed, "ca.key"), "upgrade: the CA key is kept")
    for w in config["webhooks"]:
        check(w["clientConfig"]["caBundle"] == ns_hook["clientConfig"]["caBundle"],
              f"upgrade: {w['name']} keeps the caBundle")
    check(pem(secret, "tls.crt") != pem(installed, "tls.crt"),
          "upgrade: a new serving certificate")
    check(pem(secret, "tls.key") != pem(installed, "tls.key"), "upgrade: a new serving key")
    ca = x509.load_pem_x509_certificate(pem(installed, "ca.crt"))
    cert = x509.load_pem_x509_certificate(pem(secret, "tls.crt"))
    check(signed_by(ca, cert), "upgrade: the new serving certificate is signed by the kept CA")
    # A Secret without the CA key (written by hand, or by cert-manager before a switch back):
    # a new CA, and a caBundle that is that new CA.
    partial = owned(installed)
    del partial["data"]["ca.key"]
    objects = render(existing=[partial])
    secret = one(objects, "Secret", "podward-admission-tls")
    config = one(objects, "MutatingWebhookConfiguration", "podward-admission")
    check(pem(secret, "ca.crt") != pem(installed, "ca.crt"), "no CA key: a new CA")
    check(base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])
          == pem(secret, "ca.crt"), "no CA key: the caBundle is the new CA")


def cert_manager(check) -> None:
    """With cert-manager: the chart renders Certificates and Issuers, cert-manager's cainjector
    writes the caBundle (the inject-ca-from annotation names the serving Certificate), and the
    chart generates no key material of its own."""
    for issuer_ref in ({}, {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}):
        what = "cert-manager, " + ("its own CA" if not issuer_ref else "a given issuer")
        objects = render({"certManager": {"enabled": True, "issuerRef": issuer_ref}})
        kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
        check(not any(k == "Secret" for k, _ in kinds), f"{what}: no Secret of the chart's")
        config = one(objects, "MutatingWebhookConfiguration", "podward-admission")
        check(config["metadata"].get("annotations", {}).get("cert-manager.io/inject-ca-from")
              == f"{NAMESPACE}/podward-admission", f"{what}: the caBundle injected from the Certificate")
        for w in config["webhooks"]:
            check("caBundle" not in w["clientConfig"], f"{what}: {w['name']} has no caBundle of the chart's")
        cert = one(objects, "Certificate", "podward-admission")["spec"]
        check(cert["secretName"] == "podward-admission-tls", f"{what}: the Secret the webhook mounts")
        check(f"podward-admission.{NAMESPACE}.svc" in cert["dnsNames"], f"{what}: names the Service")
        check(cert["duration"] == "8760h", f"{what}: certValidityDays")
        dep = one(objects, "Deployment", "podward-admission")
        volumes = dep["spec"]["template"]["spec"]["volumes"]
        check(any(v.get("secret", {}).get("secretName") == cert["secretName"] for v in volumes),
              f"{what}: the webhook mounts the Certificate's Secret")
        if issuer_ref:
            check(cert["issuerRef"] == issuer_ref, f"{what}: issued by the given issuer")
            check(not any(k == "Issuer" for k, _ in kinds), f"{what}: no Issuer of the chart's")
            continue
        ca_issuer = one(objects, "Issuer", "podward-admission-ca")["spec"]
        check(cert["issuerRef"] == {"name": "podward-admission-ca", "kind": "Issuer",
                                    "group": "cert-manager.io"}, f"{what}: issued by the CA Issuer")
        ca = one(objects, "Certificate", "podward-admission-ca")["spec"]
        check(ca_issuer == {"ca": {"secretName": ca["secretName"]}},
              f"{what}: the CA Issuer signs with the CA Certificate's Secret")
        check(ca["isCA"] is True, f"{what}: the CA Certificate is a CA")
        self_signed = one(objects, "Issuer", ca["issuerRef"]["name"])["spec"]
        check(self_signed == {"selfSigned": {}}, f"{what}: the CA is self-signed")
        check(ca["duration"] == "87600h", f"{what}: caValidityDays")


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

    tls_on_upgrade(secret, ns_hook, check)
    cert_manager(check)

    for f in failures:
        print(f"FAIL: {f}")
    print(f"webhook: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
