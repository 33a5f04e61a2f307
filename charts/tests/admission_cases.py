"""The admission policies' specification: requests as the API server hands them to admission, and
what each of podward's ValidatingAdmissionPolicies must answer (charts/tests/policies.py runs it).

A patch (JSON, merge, strategic or server-side apply) reaches admission as an UPDATE carrying the
whole old and new objects, exactly like a PUT: each case gives both objects in full, as the API
server has them (unstructured JSON, server-side apply's managedFields and resourceVersion moved).
A `pods/status` write cannot change the spec on a real server (the status strategy resets it
before admission); the cases that change it check the policies do not rely on that.

Each case: who (username; the node and pod claims of a bound service-account token in
`userInfo.extra`), the request (operation, group/resource/subresource, name, namespace), the old
and new objects, and the verdict: ALLOW (no policy denies), or DENY by the named policy with a
message containing the given text, or WARN likewise (the Warn policy never refuses).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from vap import Request

NODE_NAME = "authentication.kubernetes.io/node-name"
NODE_UID = "authentication.kubernetes.io/node-uid"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
CREDENTIAL = "authentication.kubernetes.io/credential-id"
NODE_UIDS = {"node-a": "a0a0a0a0-0000-4000-8000-00000000000a",
             "node-b": "b0b0b0b0-0000-4000-8000-00000000000b"}
T0 = "2026-11-28T20:00:00Z"
T1 = "2026-11-28T20:05:00Z"


@dataclass
class Ctx:
    """What a render made of the values the policies depend on."""

    namespace: str
    fullname: str
    prober_sa: str
    sentinel_sa: str
    gate: str
    lease_duration: int

    @property
    def prober(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.prober_sa}"

    @property
    def sentinel(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.sentinel_sa}"


@dataclass
class Case:
    """One request and the verdict the policies must give."""

    name: str
    policy: str  # suffix of the policy the case is about (after the release's full name)
    request: Request
    verdict: str  # ALLOW, DENY or WARN
    message: str = ""  # text the denying (warning) policy's message contains
    notes: list = field(default_factory=list)


ALLOW, DENY, WARN = "ALLOW", "DENY", "WARN"


def extra(node: str | None, pod: str = "podward-x7k2p", *, legacy: bool = False) -> dict:
    """`userInfo.extra` of a bound service-account token (a pod's, on `node`)."""
    if legacy:
        return {}
    e = {CREDENTIAL: ["JTI=8c1f"], POD_NAME: [pod], POD_UID: ["c0c0c0c0-0000-4000-8000-0000000000c0"]}
    if node is not None:
        e[NODE_NAME] = [node]
        e[NODE_UID] = [NODE_UIDS.get(node, "f0f0f0f0-0000-4000-8000-0000000000f0")]
    return e


# --- pods ---------------------------------------------------------------------------------------

def _cond(type_: str, status: str, at: str = T0, **more) -> dict:
    c = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": at}
    c.update(more)
    return c


def pod(ctx: Ctx, node: str = "node-a", *, gated: bool = True, gate: str | None = "True",
        name: str = "web-0", namespace: str = "shop") -> dict:
    """A running pod as the API server holds it (unstructured)."""
    conditions = [_cond("PodReadyToStartContainers", "True"), _cond("Initialized", "True"),
                  _cond("Ready", "True"), _cond("ContainersReady", "True"),
                  _cond("PodScheduled", "True")]
    if gate is not None:
        conditions.insert(2, {"type": ctx.gate, "status": gate, "lastTransitionTime": T0,
                              "reason": "ProbeSucceeded"})
    spec = {
        "nodeName": node,
        "containers": [{"name": "web", "image": "registry.example/web:1", "resources": {},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "schedulerName": "default-scheduler",
        "securityContext": {}, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
    }
    if gated:
        spec["readinessGates"] = [{"conditionType": ctx.gate}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace, "uid": "d0d0d0d0-0000-4000-8000-0000000000d0",
            "resourceVersion": "1000", "creationTimestamp": T0, "generation": 1,
            "labels": {"app": "web", "pod-template-hash": "5d8f"},
            "annotations": {"podward.io/probes":
                            '{"web": {"readinessProbe": {"httpGet": {"port": 8080}}}}'},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f",
                                 "uid": "e0e0e0e0-0000-4000-8000-0000000000e0", "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                               "time": T0, "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:status": {}}, "subresource": "status"}],
        },
        "spec": spec,
        "status": {
            "observedGeneration": 1, "phase": "Running", "conditions": conditions,
            "hostIP": "192.0.2.10", "hostIPs": [{"ip": "192.0.2.10"}],
            "podIP": "198.51.100.7", "podIPs": [{"ip": "198.51.100.7"}], "startTime": T0,
            "qosClass": "BestEffort",
            "containerStatuses": [{"name": "web", "ready": True, "restartCount": 0,
                                   "started": True, "image": "registry.example/web:1",
                                   "imageID": "registry.example/web@sha256:00",
                                   "containerID": "containerd://0a0a",
                                   "state": {"running": {"startedAt": T0}},
                                   "lastState": {}}],
        },
    }


def apply_gate(ctx: Ctx, old: dict, status: str, *, reason: str = "ProbeFailed",
               manager: str = "podward-prober") -> dict:
    """`old` after the server-side apply of the gate condition (the prober's and the sentinel's
    write): the condition set, managedFields and resourceVersion moved, nothing else."""
    new = copy.deepcopy(old)
    conds = new["status"].setdefault("conditions", [])
    c = {"type": ctx.gate, "status": status, "lastTransitionTime": T1, "reason": reason,
         "message": "written by " + manager}
    for i, existing in enumerate(conds):
        if existing["type"] == ctx.gate:
            conds[i] = c
            break
    else:
        conds.append(c)
    meta = new["metadata"]
    meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
    meta["managedFields"] = meta["managedFields"] + [{
        "manager": manager, "operation": "Apply", "apiVersion": "v1", "time": T1,
        "fieldsType": "FieldsV1", "subresource": "status",
        "fieldsV1": {"f:status": {"f:conditions": {f'k:{{"type":"{ctx.gate}"}}': {}}}}}]
    return new


def edit(obj: dict, fn) -> dict:
    out = copy.deepcopy(obj)
    fn(out)
    return out


def pod_status_update(ctx: Ctx, user: str, ex: dict, old: dict, new: dict, *,
                      subresource: str = "status", operation: str = "UPDATE") -> Request:
    return Request(username=user, operation=operation, group="", version="v1", resource="pods",
                   subresource=subresource, name=old["metadata"]["name"],
                   namespace=old["metadata"]["namespace"], kind="Pod", extra=ex,
                   groups=["system:serviceaccounts", f"system:serviceaccounts:{ctx.namespace}",
                           "system:authenticated"],
                   obj=new, old=old)


def _pod_cases(ctx: Ctx, who: str, user: str, policy: str, ex: dict, write: str) -> list[Case]:
    """Moves on a pod's status every writer of the gate is refused (the prober and the sentinel
    alike), `write` being the gate status its legitimate write sets."""
    old = pod(ctx, gate="True" if write == "False" else "False")
    ok = apply_gate(ctx, old, write)
    cases = []

    def deny(name, new, message, old_=old, **kw):
        cases.append(Case(f"{who}: {name}", policy,
                          pod_status_update(ctx, user, ex, old_, new, **kw), DENY, message))

    deny("changes a pod's labels through pods/status", edit(ok, lambda p: p["metadata"]["labels"]
         .update({"app": "attacker"})), "(not metadata.labels)")
    deny("adds a pod label", edit(ok, lambda p: p["metadata"]["labels"]
         .update({"extra": "x"})), "(not metadata.labels)")
    deny("changes a pod's annotations", edit(ok, lambda p: p["metadata"]["annotations"]
         .update({"podward.io/probes": "{}"})), "(not metadata.annotations)")
    deny("adds a finalizer", edit(ok, lambda p: p["metadata"].update(
        {"finalizers": ["example.com/block"]})), "(not metadata.finalizers)")
    deny("rewrites ownerReferences", edit(ok, lambda p: p["metadata"].update(
        {"ownerReferences": []})), "(not metadata.ownerReferences)")
    deny("rewrites podIPs", edit(ok, lambda p: p["status"].update(
        {"podIPs": [{"ip": "198.51.100.7"}, {"ip": "2001:db8::7"}]})), "(not status.podIPs)")
    deny("rewrites podIP", edit(ok, lambda p: p["status"].update({"podIP": "203.0.113.9"})),
         "(not status.podIP)")
    deny("rewrites hostIP", edit(ok, lambda p: p["status"].update({"hostIP": "203.0.113.1"})),
         "(not status.hostIP)")
    deny("rewrites hostIPs", edit(ok, lambda p: p["status"].update(
        {"hostIPs": [{"ip": "203.0.113.1"}]})), "(not status.hostIPs)")
    deny("rewrites status.observedGeneration", edit(ok, lambda p: p["status"].update(
        {"observedGeneration": 7})), "(not status.observedGeneration)")
    deny("changes the phase", edit(ok, lambda p: p["status"].update({"phase": "Failed"})),
         "(not status.phase)")
    deny("changes containerStatuses", edit(ok, lambda p: p["status"]["containerStatuses"][0]
         .update({"ready": False})), "(not status.containerStatuses)")
    deny("sets status.message", edit(ok, lambda p: p["status"].update({"message": "evicted"})),
         "(not status.message)")
    deny("sets nominatedNodeName", edit(ok, lambda p: p["status"].update(
        {"nominatedNodeName": "node-b"})), "(not status.nominatedNodeName)")
    deny("changes the spec (the server resets it; the policy does not rely on that)",
         edit(ok, lambda p: p["spec"].update({"nodeName": "node-a", "priority": 100})),
         "(not spec)")

    def set_ready(p, status):
        for c in p["status"]["conditions"]:
            if c["type"] == "Ready":
                c["status"] = status

    deny("sets kubelet's Ready condition False", edit(ok, lambda p: set_ready(p, "False")),
         "only its own condition in a pod's status.conditions")
    deny("removes kubelet's Ready condition (a strategic-merge patch deleting it)",
         edit(ok, lambda p: p["status"].update(
             {"conditions": [c for c in p["status"]["conditions"] if c["type"] != "Ready"]})),
         "only its own condition in a pod's status.conditions")
    deny("adds a condition of another type", edit(ok, lambda p: p["status"]["conditions"].append(
        {"type": "example.com/other", "status": "True"})), "only its own condition in a pod's status.conditions")
    ungated_old = pod(ctx, gated=False, gate=None)
    deny("adds the gate condition to a pod whose readinessGates lack it",
         apply_gate(ctx, ungated_old, write), "spec.readinessGates lacks", old_=ungated_old)
    deny("writes the main resource (pods, not pods/status)", ok, "only through pods/status",
         subresource="")
    deny("deletes a pod", None, "only through pods/status", operation="DELETE", subresource="")
    deny("evicts a pod (pods/eviction)", {"apiVersion": "policy/v1", "kind": "Eviction",
                                          "metadata": {"name": "web-0", "namespace": "shop"}},
         "only through pods/status", operation="CREATE", subresource="eviction")
    deny("fails closed on an object it cannot read (failurePolicy Fail)",
         edit(ok, lambda p: p.pop("spec")), "", old_=edit(old, lambda p: p.pop("spec")))
    return cases


def prober_pod_cases(ctx: Ctx) -> list[Case]:
    policy = "-own-node-pods"
    user, ex = ctx.prober, extra("node-a")
    own = pod(ctx, gate="False")
    cases = [
        Case("prober: sets its own node's gated pod's condition True", policy,
             pod_status_update(ctx, user, ex, own, apply_gate(ctx, own, "True")), ALLOW),
        Case("prober: sets its own node's gated pod's condition False", policy,
             pod_status_update(ctx, user, ex, pod(ctx), apply_gate(ctx, pod(ctx), "False")),
             ALLOW),
        Case("prober: writes the first condition of a gated pod", policy,
             pod_status_update(ctx, user, ex, pod(ctx, gate=None),
                               apply_gate(ctx, pod(ctx, gate=None), "True")), ALLOW),
        Case("prober: node-a's token writes a pod on node-b", policy,
             pod_status_update(ctx, user, ex, pod(ctx, "node-b", gate="False"),
                               apply_gate(ctx, pod(ctx, "node-b", gate="False"), "True")),
             DENY, "pods on its own node"),
        Case("prober: a token without the node claim", policy,
             pod_status_update(ctx, user, extra(None), own, apply_gate(ctx, own, "True")),
             DENY, "token bound to its node"),
        Case("prober: a legacy token (no userInfo.extra at all)", policy,
             pod_status_update(ctx, user, extra(None, legacy=True), own,
                               apply_gate(ctx, own, "True")),
             DENY, "token bound to its node"),
        Case("prober: sets the gate to a status that is no condition status", policy,
             pod_status_update(ctx, user, ex, own, apply_gate(ctx, own, "Maybe")),
             DENY, "True, False or Unknown"),
        Case("prober: a ServiceAccount of the same name in another namespace is not matched",
             policy, pod_status_update(ctx, f"system:serviceaccount:other:{ctx.prober_sa}", ex, own,
                                       edit(own, lambda p: p["metadata"]["labels"].update(
                                           {"app": "x"}))), ALLOW),
        Case("prober: kubelet (another user) is not matched", policy,
             pod_status_update(ctx, "system:node:node-b", {}, own,
                               edit(own, lambda p: p["status"].update({"phase": "Failed"}))),
             ALLOW),
    ]
    return cases + _pod_cases(ctx, "prober", user, policy, ex, "True")


def sentinel_pod_cases(ctx: Ctx) -> list[Case]:
    policy = "-sentinel-only-not-ready"
    user, ex = ctx.sentinel, extra("node-c", pod=f"{ctx.sentinel_sa}-6b7-q2x")
    true_pod = pod(ctx, "node-b")
    unknown = pod(ctx, "node-b", gate="Unknown")
    false_pod = pod(ctx, "node-b", gate="False")
    cases = [
        Case("sentinel: marks a gated pod on any node False", policy,
             pod_status_update(ctx, user, ex, true_pod,
                               apply_gate(ctx, true_pod, "False", reason="ProberNotReporting")),
             ALLOW),
        Case("sentinel: marks an Unknown gate False", policy,
             pod_status_update(ctx, user, ex, unknown, apply_gate(ctx, unknown, "False")), ALLOW),
        Case("sentinel: sets a gate True", policy,
             pod_status_update(ctx, user, ex, false_pod, apply_gate(ctx, false_pod, "True")),
             DENY, "only set the readiness-gate condition to False"),
        Case("sentinel: sets a gate Unknown", policy,
             pod_status_update(ctx, user, ex, true_pod, apply_gate(ctx, true_pod, "Unknown")),
             DENY, "only set the readiness-gate condition to False"),
        Case("sentinel: removes the gate condition", policy,
             pod_status_update(ctx, user, ex, true_pod, edit(true_pod, lambda p: p["status"].update(
                 {"conditions": [c for c in p["status"]["conditions"] if c["type"] != ctx.gate]}))),
             DENY, "only set the readiness-gate condition to False"),
        Case("sentinel: kubelet (another user) is not matched", policy,
             pod_status_update(ctx, "system:node:node-b", {}, true_pod,
                               apply_gate(ctx, true_pod, "True")), ALLOW),
    ]
    return cases + _pod_cases(ctx, "sentinel", user, policy, ex, "False")


# --- events -------------------------------------------------------------------------------------

def core_event(node: str = "node-a", *, component: str = "podward-prober", count: int = 1,
               name: str = "web-0.187a1b2c3d4e5f60", namespace: str = "shop") -> dict:
    """A core v1 event as the prober writes it (kubelet's makeEvent), as the server holds it."""
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "500",
                     "creationTimestamp": T0, "uid": "f1f1f1f1-0000-4000-8000-0000000000f1"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": namespace,
                           "uid": "d0d0d0d0-0000-4000-8000-0000000000d0",
                           "fieldPath": "spec.containers{web}"},
        "reason": "Unhealthy", "message": "Readiness probe failed: HTTP probe failed with statuscode: 503",
        "source": {"component": component, "host": node},
        "firstTimestamp": T0, "lastTimestamp": T0, "count": count, "type": "Warning",
        "eventTime": None, "reportingComponent": component, "reportingInstance": node,
    }


def bump(ev: dict) -> dict:
    """The prober's strategic-merge patch of a repeat: count, lastTimestamp, message."""
    return edit(ev, lambda e: (e.update({"count": e["count"] + 1, "lastTimestamp": T1,
                                         "message": e["message"] + " (combined)"}),
                               e["metadata"].update({"resourceVersion": "501"})))


def event_request(user: str, ex: dict, op: str, new: dict | None, old: dict | None = None, *,
                  group: str = "", version: str = "v1") -> Request:
    o = new or old
    return Request(username=user, operation=op, group=group, version=version, resource="events",
                   name=o["metadata"]["name"], namespace=o["metadata"]["namespace"], kind="Event",
                   extra=ex, obj=new, old=old)


def prober_event_cases(ctx: Ctx) -> list[Case]:
    policy = "-own-node-events"
    user, ex = ctx.prober, extra("node-a")
    ev = core_event()
    other = core_event("node-b")
    kubelet = core_event(component="kubelet")

    def case(name, req, verdict, message=""):
        return Case(f"prober event: {name}", policy, req, verdict, message)

    return [
        case("creates its own node's event", event_request(user, ex, "CREATE", ev), ALLOW),
        case("creates a Normal event about the whole pod (ProbesTakenOver, no fieldPath)",
             event_request(user, ex, "CREATE", edit(ev, lambda e: (
                 e["involvedObject"].pop("fieldPath"),
                 e.update({"type": "Normal", "reason": "ProbesTakenOver",
                           "message": "Probes taken over by podward (moved from the pod spec "
                                      "into podward.io/probes; kubelet does not run them): "
                                      "container web: livenessProbe, readinessProbe"})))),
             ALLOW),
        case("bumps its own event (count, lastTimestamp, message)",
             event_request(user, ex, "UPDATE", bump(ev), ev), ALLOW),
        case("creates an event as another node (source.host)",
             event_request(user, ex, "CREATE", edit(ev, lambda e: e["source"].update(
                 {"host": "node-b"}))), DENY, "as its own node"),
        case("creates an event as another node (reportingInstance)",
             event_request(user, ex, "CREATE", edit(ev, lambda e: e.update(
                 {"reportingInstance": "node-b"}))), DENY, "as its own node"),
        case("creates an event as kubelet (`kubelet, node-b` in kubectl describe)",
             event_request(user, ex, "CREATE", core_event("node-b", component="kubelet")),
             DENY, "as podward-prober"),
        case("creates an event as kubelet on its own node",
             event_request(user, ex, "CREATE", kubelet), DENY, "as podward-prober"),
        case("creates an event with no source", event_request(
            user, ex, "CREATE", edit(ev, lambda e: e.pop("source"))), DENY, "as its own node"),
        case("creates an event about a Node, not a pod",
             event_request(user, ex, "CREATE", edit(ev, lambda e: e["involvedObject"].update(
                 {"kind": "Node", "name": "node-b", "namespace": ""}))), DENY, "about a pod"),
        case("creates an event in another namespace than its pod's",
             event_request(user, ex, "CREATE", edit(ev, lambda e: e["involvedObject"].update(
                 {"namespace": "kube-system"}))), DENY, "about a pod"),
        case("creates an event with a finalizer", event_request(
            user, ex, "CREATE", edit(ev, lambda e: e["metadata"].update(
                {"finalizers": ["example.com/keep"]}))), DENY, "no labels, annotations"),
        case("rewrites another node's event", event_request(
            user, ex, "UPDATE", edit(bump(other), lambda e: (e["source"].update({"host": "node-a"}),
                                                            e.update({"reportingInstance": "node-a"}))),
            other), DENY, "events it did not create"),
        case("bumps another node's event keeping its source", event_request(
            user, ex, "UPDATE", bump(other), other), DENY, "events it did not create"),
        case("rewrites kubelet's event on its own node", event_request(
            user, ex, "UPDATE", bump(kubelet), kubelet), DENY, "events it did not create"),
        case("changes the reason of its own event", event_request(
            user, ex, "UPDATE", edit(bump(ev), lambda e: e.update({"reason": "Killing"})), ev),
            DENY, "only count, lastTimestamp and message"),
        case("moves its own event to another pod", event_request(
            user, ex, "UPDATE", edit(bump(ev), lambda e: e["involvedObject"].update(
                {"name": "db-0"})), ev), DENY, "only count, lastTimestamp and message"),
        case("a token without the node claim", event_request(
            user, extra(None), "CREATE", ev), DENY, "token bound to its node"),
        case("deletes an event", event_request(user, ex, "DELETE", None, other), DENY,
             "only create and patch core v1 events"),
        case("records an events.k8s.io/v1 event", event_request(
            user, ex, "CREATE", events_k8s_event(ctx, "node-a", "podward-prober"),
            group="events.k8s.io"), DENY, "only create and patch core v1 events"),
        case("kubelet (another user) is not matched", event_request(
            "system:node:node-b", {}, "CREATE", kubelet), ALLOW),
    ]


def events_k8s_event(ctx: Ctx, instance: str, controller: str = "podward-sentinel") -> dict:
    """An events.k8s.io/v1 event as kube-rs's Recorder writes it."""
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web-0.187a1b2c3d4e5f61", "namespace": "shop",
                     "resourceVersion": "600", "creationTimestamp": T0},
        "eventTime": "2026-11-28T20:00:00.000000Z", "reportingController": controller,
        "reportingInstance": instance, "action": "MarkNotReady", "reason": "ProberNotReporting",
        "note": "podward-prober on node node-b stopped renewing its lease", "type": "Warning",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "shop",
                      "uid": "d0d0d0d0-0000-4000-8000-0000000000d0"},
    }


def sentinel_event(instance: str, *, component: str = "podward-sentinel", node: bool = False,
                   count: int = 1) -> dict:
    """A core v1 event as the sentinel writes it (the prober's correlator, client-go's makeEvent):
    about a pod in its namespace, or about a Node in `default`."""
    ev = core_event(instance, component=component, count=count,
                    namespace="default" if node else "shop")
    ev["reason"], ev["message"] = "ProberNotReporting", "podward-prober on node-b stopped renewing"
    if node:
        ev["involvedObject"] = {"apiVersion": "v1", "kind": "Node", "name": "node-b",
                                "uid": NODE_UIDS["node-b"]}
    else:
        ev["involvedObject"].pop("fieldPath")
    return ev


def sentinel_event_cases(ctx: Ctx) -> list[Case]:
    policy = "-sentinel-only-not-ready"
    me = f"{ctx.sentinel_sa}-6b7-q2x"
    user, ex = ctx.sentinel, extra("node-c", pod=me)
    ev = sentinel_event(me)
    on_node = sentinel_event(me, node=True)
    kubelet = sentinel_event("node-b", component="kubelet")

    def case(name, op, new, old=None, verdict=ALLOW, message="", group=""):
        return Case(f"sentinel event: {name}", policy,
                    event_request(user, ex, op, new, old, group=group), verdict, message)

    return [
        case("records its own event about a pod", "CREATE", ev),
        case("records its own event about a Node", "CREATE", on_node),
        case("bumps its own event (count, lastTimestamp, message)", "UPDATE", bump(ev), ev),
        case("records as kubelet", "CREATE", kubelet, None, DENY, "as itself"),
        case("records as the other replica", "CREATE",
             sentinel_event(f"{ctx.sentinel_sa}-6b7-zz9"), None, DENY, "as itself"),
        case("records an events.k8s.io/v1 event", "CREATE", events_k8s_event(ctx, me), None, DENY,
             "core v1 events", group="events.k8s.io"),
        case("deletes an event", "DELETE", None, ev, DENY, "core v1 events"),
        case("rewrites kubelet's event", "UPDATE",
             edit(bump(kubelet), lambda e: (e["source"].update({"component": "podward-sentinel",
                                                                "host": me}),
                                           e.update({"reportingComponent": "podward-sentinel",
                                                     "reportingInstance": me}))),
             kubelet, DENY, "events it recorded as itself"),
        case("records a Node event outside default", "CREATE",
             edit(on_node, lambda e: e["metadata"].update({"namespace": "shop"})), None, DENY,
             "about a pod"),
        case("records a pod event outside the pod's namespace", "CREATE",
             edit(ev, lambda e: e["metadata"].update({"namespace": "kube-system"})), None, DENY,
             "about a pod"),
        case("records an event about a Secret", "CREATE",
             edit(ev, lambda e: e["involvedObject"].update({"kind": "Secret"})), None, DENY,
             "about a pod"),
        case("changes the reason of its own event", "UPDATE",
             edit(bump(ev), lambda e: e.update({"reason": "Killing"})), ev, DENY,
             "only count, lastTimestamp and message"),
        case("labels its event", "CREATE",
             edit(ev, lambda e: e["metadata"].update({"labels": {"a": "b"}})), None, DENY,
             "no labels"),
    ]


# --- leases -------------------------------------------------------------------------------------

def node_lease(ctx: Ctx, node: str = "node-a", *, zone: str | None = "zone-1",
               duration: int | None = None, owner: bool = False) -> dict:
    """A node lease as the prober creates it (lease.rs `fresh`)."""
    labels = {"app.kubernetes.io/managed-by": "podward-prober", "podward.io/node-lease": "true"}
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    meta = {"name": node, "namespace": ctx.namespace, "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node,
                                    "uid": NODE_UIDS.get(node, "")}]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": node,
                     "leaseDurationSeconds": ctx.lease_duration if duration is None else duration,
                     "renewTime": "2026-11-28T20:00:00.000000Z"}}


def stored(lease: dict) -> dict:
    return edit(lease, lambda l: l["metadata"].update(
        {"resourceVersion": "700", "uid": "a1a1a1a1-0000-4000-8000-0000000000a1",
         "creationTimestamp": T0}))


def renewed(lease: dict) -> dict:
    """lease.rs `renewed`: the stored lease with a new renewTime."""
    return edit(lease, lambda l: l["spec"].update({"renewTime": "2026-11-28T20:00:10.000000Z"}))


def lease_request(ctx: Ctx, user: str, ex: dict, op: str, new: dict | None,
                  old: dict | None = None) -> Request:
    o = new or old
    return Request(username=user, operation=op, group="coordination.k8s.io", version="v1",
                   resource="leases", name=o["metadata"]["name"],
                   namespace=o["metadata"]["namespace"], kind="Lease", extra=ex, obj=new, old=old)


def prober_lease_cases(ctx: Ctx) -> list[Case]:
    policy = "-own-node-lease"
    user, ex = ctx.prober, extra("node-a")
    mine = stored(node_lease(ctx))
    owned = stored(node_lease(ctx, owner=True))

    def case(name, op, new, old=None, verdict=ALLOW, message="", ex_=ex):
        return Case(f"prober lease: {name}", policy, lease_request(ctx, user, ex_, op, new, old),
                    verdict, message)

    def relabel(fn):
        return edit(renewed(mine), lambda l: fn(l["metadata"]["labels"]))

    return [
        case("creates its own node's lease", "CREATE", node_lease(ctx)),
        case("creates its own node's lease without a zone", "CREATE", node_lease(ctx, zone=None)),
        case("renews its own node's lease", "UPDATE", renewed(mine), mine),
        case("creates its lease owned by its Node", "CREATE", node_lease(ctx, owner=True)),
        case("renews its lease owned by its Node", "UPDATE", renewed(owned), owned),
        case("renews, keeping a label an operator added", "UPDATE",
             renewed(edit(mine, lambda l: l["metadata"]["labels"].update({"team": "infra"}))),
             edit(mine, lambda l: l["metadata"]["labels"].update({"team": "infra"}))),
        case("creates another node's lease", "CREATE", node_lease(ctx, "node-b"), None, DENY,
             "lease of its own node"),
        case("renews another node's lease", "UPDATE", renewed(stored(node_lease(ctx, "node-b"))),
             stored(node_lease(ctx, "node-b")), DENY, "lease of its own node"),
        case("deletes its own lease", "DELETE", None, mine, DENY, "lease of its own node"),
        case("renews kubelet's node lease (kube-node-lease) of its own node", "UPDATE",
             renewed(edit(mine, lambda l: l["metadata"].update({"namespace": "kube-node-lease"}))),
             edit(mine, lambda l: l["metadata"].update({"namespace": "kube-node-lease"})), DENY,
             "lease of its own node"),
        case("a token without the node claim", "CREATE", node_lease(ctx), None, DENY,
             "lease of its own node", ex_=extra(None)),
        case("holds its lease as another node", "UPDATE",
             edit(renewed(mine), lambda l: l["spec"].update({"holderIdentity": "node-b"})), mine,
             DENY, "only hold its own node's lease"),
        case("drops the holder", "UPDATE",
             edit(renewed(mine), lambda l: l["spec"].pop("holderIdentity")), mine,
             DENY, "only hold its own node's lease"),
        case("stretches the duration", "UPDATE",
             edit(renewed(mine), lambda l: l["spec"].update({"leaseDurationSeconds": 3600})), mine,
             DENY, "leaseDurationSeconds"),
        case("creates with another duration", "CREATE", node_lease(ctx, duration=5), None,
             DENY, "leaseDurationSeconds"),
        case("moves its lease to another zone", "UPDATE",
             relabel(lambda lb: lb.update({"topology.kubernetes.io/zone": "zone-2"})), mine,
             DENY, "zone"),
        case("drops its zone", "UPDATE",
             relabel(lambda lb: lb.pop("topology.kubernetes.io/zone")), mine, DENY, "zone"),
        case("adds a label", "UPDATE", relabel(lambda lb: lb.update({"x": "y"})), mine, DENY,
             "labels"),
        case("drops the node-lease label", "UPDATE",
             relabel(lambda lb: lb.pop("podward.io/node-lease")), mine, DENY, "labels"),
        case("creates without the node-lease label", "CREATE",
             edit(node_lease(ctx), lambda l: l["metadata"]["labels"].pop("podward.io/node-lease")),
             None, DENY, "labels"),
        case("adds an annotation", "UPDATE",
             edit(renewed(mine), lambda l: l["metadata"].update({"annotations": {"a": "b"}})),
             mine, DENY, "annotations"),
        # lease.rs: the prober lists its per-pod and transient problems on its lease.
        case("renews with its problems listed", "UPDATE",
             edit(renewed(mine), lambda l: l["metadata"].update({"annotations": {
                 "podward.io/prober-problems":
                     "the pod watch failed 2 time(s) (last at Unix 1764360000s), resumed"}})),
             mine),
        case("creates its lease with its problems listed", "CREATE",
             edit(node_lease(ctx), lambda l: l["metadata"].update({"annotations": {
                 "podward.io/prober-problems": "the node's pods are not listed from the API yet"}}))),
        case("lists problems beside another annotation", "UPDATE",
             edit(renewed(mine), lambda l: l["metadata"].update({"annotations": {
                 "podward.io/prober-problems": "x", "a": "b"}})), mine, DENY, "annotations"),
        case("lists problems over 4 KiB", "UPDATE",
             edit(renewed(mine), lambda l: l["metadata"].update({"annotations": {
                 "podward.io/prober-problems": "x" * 4097}})), mine, DENY, "annotations"),
        case("adds a finalizer", "UPDATE",
             edit(renewed(mine), lambda l: l["metadata"].update({"finalizers": ["x/y"]})),
             mine, DENY, "finalizers"),
        case("owns its lease by another node", "UPDATE",
             edit(renewed(mine), lambda l: l["metadata"].update({"ownerReferences": [
                 {"apiVersion": "v1", "kind": "Node", "name": "node-b",
                  "uid": NODE_UIDS["node-b"]}]})), mine, DENY, "ownerReferences"),
        case("owns its lease by its own node's name with another node's uid", "UPDATE",
             edit(renewed(mine), lambda l: l["metadata"].update({"ownerReferences": [
                 {"apiVersion": "v1", "kind": "Node", "name": "node-a",
                  "uid": NODE_UIDS["node-b"]}]})), mine, DENY, "ownerReferences"),
        case("owns its lease by a Pod", "CREATE",
             edit(node_lease(ctx), lambda l: l["metadata"].update({"ownerReferences": [
                 {"apiVersion": "v1", "kind": "Pod", "name": "node-a", "uid": "u"}]})), None,
             DENY, "ownerReferences"),
        case("sets a preferred holder", "UPDATE",
             edit(renewed(mine), lambda l: l["spec"].update({"preferredHolder": "node-b"})),
             mine, DENY, "only holderIdentity, leaseDurationSeconds, renewTime"),
        case("resets leaseTransitions", "UPDATE",
             edit(renewed(edit(mine, lambda l: l["spec"].update({"leaseTransitions": 3}))),
                  lambda l: l["spec"].update({"leaseTransitions": 0})),
             edit(mine, lambda l: l["spec"].update({"leaseTransitions": 3})), DENY,
             "only holderIdentity, leaseDurationSeconds, renewTime"),
        Case("prober lease: kube-controller-manager (another user) is not matched", policy,
             lease_request(ctx, "system:kube-controller-manager", {}, "DELETE", None, mine),
             ALLOW),
    ]


def sentinel_lease_cases(ctx: Ctx) -> list[Case]:
    policy = "-sentinel-only-not-ready"
    user, ex = ctx.sentinel, extra("node-c", pod=f"{ctx.sentinel_sa}-6b7-q2x")
    election = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": ctx.sentinel_sa, "namespace": ctx.namespace},
                "spec": {"holderIdentity": f"{ctx.sentinel_sa}-6b7-q2x", "leaseDurationSeconds": 15}}
    return [
        Case("sentinel lease: takes its leader lease", policy,
             lease_request(ctx, user, ex, "UPDATE", election, election), ALLOW),
        Case("sentinel lease: renews a node's lease", policy,
             lease_request(ctx, user, ex, "UPDATE", renewed(stored(node_lease(ctx))),
                           stored(node_lease(ctx))), DENY, "only write its own leader lease"),
        Case("sentinel lease: writes a lease of its leader lease's name in another namespace",
             policy, lease_request(ctx, user, ex, "UPDATE",
                                   edit(election, lambda l: l["metadata"].update({"namespace": "x"})),
                                   edit(election, lambda l: l["metadata"].update({"namespace": "x"}))),
             DENY, "only write its own leader lease"),
        Case("sentinel lease: deletes its leader lease", policy,
             lease_request(ctx, user, ex, "DELETE", None, election), DENY,
             "only write its own leader lease"),
    ]


# --- the creation-time warning ------------------------------------------------------------------

def annotation_cases(ctx: Ctx) -> list[Case]:
    policy = "-probes-annotation"

    def create(p):
        return Request(username="alice", operation="CREATE", group="", version="v1",
                       resource="pods", name=p["metadata"]["name"],
                       namespace=p["metadata"]["namespace"], kind="Pod", obj=p)

    ungated = edit(pod(ctx, gated=False, gate=None), lambda p: p.pop("status"))
    gated = edit(pod(ctx, gate=None), lambda p: p.pop("status"))
    both = edit(gated, lambda p: (p["spec"]["containers"][0].update(
        {"readinessProbe": {"httpGet": {"port": 8080}}})))
    plain = edit(ungated, lambda p: p["metadata"].pop("annotations"))
    return [
        Case("annotation: a readinessProbe without the gate warns", policy, create(ungated), WARN,
             f"spec.readinessGates lacks {ctx.gate}"),
        Case("annotation: a readinessProbe with the gate is quiet", policy, create(gated), ALLOW),
        Case("annotation: a probe type in both the spec and the annotation warns", policy,
             create(both), WARN, "declared both in a container's spec"),
        Case("annotation: a pod without the annotation is not matched", policy, create(plain),
             ALLOW),
    ]


def all_cases(ctx: Ctx) -> list[Case]:
    return (prober_pod_cases(ctx) + prober_event_cases(ctx) + prober_lease_cases(ctx)
            + sentinel_pod_cases(ctx) + sentinel_event_cases(ctx) + sentinel_lease_cases(ctx)
            + annotation_cases(ctx))
