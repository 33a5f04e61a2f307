#!/usr/bin/env python3
"""Render charts/podward with Helm's own engine and print the manifests as JSON.

helm-sdkpy (PyPI) carries the Helm library, but its Python API has no `template` action and its
`Install` has no dry-run switch. So this renderer runs a real `helm install` (helm-sdkpy's Install)
against a minimal, in-process Kubernetes API stand-in on 127.0.0.1: it answers discovery and accepts
every create, including the Secret in which Helm records the release. The release Helm returns carries the
rendered `manifest` and `NOTES.txt`, produced by exactly the code `helm install`/`helm template` run —
values merging, schema checks, `required`, `fail` and all. Nothing leaves the loopback interface.

Usage:
  python3 charts/tests/render.py [--values FILE]... [--set-json JSON] [--out FILE]
                                 [--kube-version 1.33.0] [--namespace-labels JSON]
                                 [--release podward] [--namespace podward-system]
                                 [--existing JSON]
--kube-version is the version the API stand-in reports (Helm checks the chart's kubeVersion against
it); --namespace-labels makes the release namespace exist with those labels (what the chart's
`lookup` of it sees; without it the namespace does not exist yet); --existing is a JSON list of
objects the stand-in already holds (what `lookup` finds of an earlier release's objects).
Prints {"objects": [<manifest objects>], "notes": "<NOTES.txt>", "created": [<kind/name>...]}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent.parent / "podward"

# The API groups the chart's objects live in (discovery must know a kind for Helm to build it).
RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    # group/version: [(plural, Kind, namespaced)]
    "v1": [
        ("namespaces", "Namespace", False),
        ("pods", "Pod", True),
        ("services", "Service", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("configmaps", "ConfigMap", True),
        ("secrets", "Secret", True),
    ],
    "apps/v1": [("daemonsets", "DaemonSet", True), ("deployments", "Deployment", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    "admissionregistration.k8s.io/v1": [
        ("validatingadmissionpolicies", "ValidatingAdmissionPolicy", False),
        ("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False),
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False),
    ],
    "scheduling.k8s.io/v1": [("priorityclasses", "PriorityClass", False)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "flowcontrol.apiserver.k8s.io/v1": [
        ("flowschemas", "FlowSchema", False),
        ("prioritylevelconfigurations", "PriorityLevelConfiguration", False),
    ],
    "cert-manager.io/v1": [
        ("certificates", "Certificate", True),
        ("issuers", "Issuer", True),
        ("clusterissuers", "ClusterIssuer", False),
    ],
    "monitoring.coreos.com/v1": [
        ("servicemonitors", "ServiceMonitor", True),
        ("prometheusrules", "PrometheusRule", True),
    ],
}
_PLURALS = {plural: kind for entries in RESOURCES.values() for plural, kind, _ in entries}
DEFAULT_KUBE_VERSION = "1.33.0"


def _version_info(version: str) -> dict:
    major, minor, _patch = version.split(".")
    return {"major": major, "minor": minor, "gitVersion": f"v{version}", "platform": "linux/amd64"}


def _resource_list(gv: str) -> dict:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": [
            {
                "name": plural,
                "singularName": kind.lower(),
                "namespaced": namespaced,
                "kind": kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
            for plural, kind, namespaced in RESOURCES[gv]
        ],
    }


def _group_list() -> dict:
    groups = []
    for gv in RESOURCES:
        if "/" not in gv:
            continue
        group, version = gv.split("/")
        entry = {"groupVersion": gv, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class FakeApiServer(BaseHTTPRequestHandler):
    """Discovery plus 'nothing exists yet' plus 'create succeeds'. Records what Helm created."""

    created: list[dict] = []
    lock = threading.Lock()
    version: dict = _version_info(DEFAULT_KUBE_VERSION)
    # name -> labels of namespaces that exist
    namespaces: dict[str, dict] = {}
    # objects that exist already (an earlier release's), as `lookup` would find them
    existing: list[dict] = []

    def log_message(self, format, *args):  # noqa: A002  (silence per-request logging)
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        # Plain JSON (not the aggregated discovery media type): client-go falls back to legacy discovery.
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "reason": "NotFound", "code": 404, "message": "not found"})

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/version":
            return self._send(200, self.version)
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                                    "serverAddressByClientCIDRs": []})
        if path == "/apis":
            return self._send(200, _group_list())
        if path == "/api/v1":
            return self._send(200, _resource_list("v1"))
        parts = path.split("/")
        if len(parts) == 5 and parts[1:4] == ["api", "v1", "namespaces"] and parts[4] in self.namespaces:
            return self._send(200, {"kind": "Namespace", "apiVersion": "v1",
                                    "metadata": {"name": parts[4], "resourceVersion": "1",
                                                 "labels": self.namespaces[parts[4]]}})
        if len(parts) == 4 and parts[1] == "apis" and f"{parts[2]}/{parts[3]}" in RESOURCES:
            return self._send(200, _resource_list(f"{parts[2]}/{parts[3]}"))
        namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts[:-1] else None
        kind = _PLURALS.get(parts[-1])
        if kind is not None:
            # A collection (Helm's release storage lists its Secrets by label): what exists.
            items = [o for o in self.existing if o.get("kind") == kind
                     and namespace in (None, o.get("metadata", {}).get("namespace"))]
            return self._send(200, {"kind": f"{kind}List", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": "1"}, "items": items})
        kind = _PLURALS.get(parts[-2]) if len(parts) > 2 else None
        for o in self.existing:
            meta = o.get("metadata", {})
            if (o.get("kind") == kind and meta.get("name") == parts[-1]
                    and namespace == meta.get("namespace")):
                return self._send(200, o)
        # Any other object: it does not exist yet, so Helm creates it.
        return self._not_found()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if "json" not in self.headers.get("Content-Type", ""):
            # Protobuf: Helm's own release record (a Secret). Answer with a JSON Secret; client-go
            # accepts JSON whatever it sent.
            name = self.path.split("?", 1)[0].rstrip("/").split("/")[-1]
            return self._send(201, {"kind": "Secret", "apiVersion": "v1",
                                    "metadata": {"name": name, "resourceVersion": "1"}})
        body = json.loads(raw or b"{}")
        with self.lock:
            self.created.append(body)
        body.setdefault("metadata", {}).setdefault("uid", "00000000-0000-0000-0000-000000000000")
        body["metadata"].setdefault("resourceVersion", "1")
        self._send(201, body)

    def do_PUT(self) -> None:  # noqa: N802
        self.do_POST()

    def do_PATCH(self) -> None:  # noqa: N802
        # Helm patches what exists already (an earlier release's object): answer with the object
        # the patch gives, kind and all, as the API server does.
        length = int(self.headers.get("Content-Length", "0"))
        patch = json.loads(self.rfile.read(length) or b"{}")
        name = self.path.split("?", 1)[0].rstrip("/").split("/")[-1]
        for o in self.existing:
            if o.get("metadata", {}).get("name") == name:
                with self.lock:
                    self.created.append(patch)
                return self._send(200, _merge(json.loads(json.dumps(o)), patch))
        return self._not_found()


def _merge(dst: dict, src: dict) -> dict:
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge(dst[key], value)
        else:
            dst[key] = value
    return dst


def render(values: dict, release: str = "podward", namespace: str = "podward-system",
           kube_version: str = DEFAULT_KUBE_VERSION, namespace_labels: dict | None = None,
           existing: list[dict] | None = None) -> dict:
    os.environ["HELM_DRIVER"] = "memory"
    os.environ.setdefault("HELM_CACHE_HOME", "/tmp/podward-helm-cache")
    os.environ.setdefault("HELM_CONFIG_HOME", "/tmp/podward-helm-config")
    import helm_sdkpy  # noqa: PLC0415  (the Go runtime reads the environment when it loads)

    FakeApiServer.created = []
    FakeApiServer.version = _version_info(kube_version)
    FakeApiServer.namespaces = {} if namespace_labels is None else {namespace: namespace_labels}
    FakeApiServer.existing = list(existing or [])
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        kubeconfig = yaml.safe_dump({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                       "namespace": namespace}}],
            "current-context": "fake",
        })
        config = helm_sdkpy.Configuration(namespace=namespace, kubeconfig=kubeconfig)
        rel = asyncio.run(helm_sdkpy.Install(config).run(
            release, str(CHART), values=values or None, wait=False, timeout=60))
    finally:
        server.shutdown()
        server.server_close()
    manifest = rel.get("manifest", "")
    objects = [doc for doc in yaml.safe_load_all(manifest) if doc]
    info = rel.get("info", {})
    created = [f"{o.get('kind')}/{o.get('metadata', {}).get('name')}" for o in FakeApiServer.created]
    return {"objects": objects, "notes": info.get("notes", ""), "created": created}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", action="append", default=[], help="values YAML file (repeatable)")
    parser.add_argument("--set-json", default=None, help="values as a JSON object, merged last")
    parser.add_argument("--out", default=None, help="write the JSON here instead of stdout")
    parser.add_argument("--kube-version", default=DEFAULT_KUBE_VERSION,
                        help="Kubernetes version the API stand-in reports (MAJOR.MINOR.PATCH)")
    parser.add_argument("--namespace-labels", default=None,
                        help="JSON object: the release namespace exists with these labels")
    parser.add_argument("--release", default="podward", help="release name (helm install NAME)")
    parser.add_argument("--namespace", default="podward-system", help="release namespace (-n)")
    parser.add_argument("--existing", default=None,
                        help="JSON list: objects that exist already (what lookup finds)")
    args = parser.parse_args()
    values: dict = {}
    for path in args.values:
        _merge(values, yaml.safe_load(Path(path).read_text()) or {})
    if args.set_json:
        _merge(values, json.loads(args.set_json))
    labels = json.loads(args.namespace_labels) if args.namespace_labels else None
    result = render(values, release=args.release, namespace=args.namespace,
                    kube_version=args.kube_version, namespace_labels=labels,
                    existing=json.loads(args.existing) if args.existing else None)
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
