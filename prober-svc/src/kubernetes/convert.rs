//! A `Pod` from the API server into the prober's [`ApiPod`]: only the fields the prober uses, so
//! the reflector holds a few hundred bytes per pod instead of the whole object.
//!
//! The object is outside input: a field that does not fit is dropped (a hook becomes
//! [`Hook::Invalid`]), never a reason to drop the pod.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use podward_api::labels;

use crate::kubernetes::names::MOVED_ANNOTATION;
use crate::model::api_pod::{
    ApiContainer, ApiPod, ConditionStatus, ContainerKind, GateCondition, Hook, PodPhase,
    RestartPolicy,
};
use crate::spec::{Handler, ProbeType, parse_pod_probes};

/// The prober's view of `pod`; `None` without a UID (not an object the API server made).
/// `gate_type` is the readiness-gate condition type the prober owns.
pub fn api_pod(pod: &Pod, gate_type: &str) -> Option<ApiPod> {
    let meta = &pod.metadata;
    let uid = meta.uid.clone().filter(|u| !u.is_empty())?;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let annotations = meta.annotations.as_ref();
    let moved = moved_record(annotations.and_then(|a| a.get(MOVED_ANNOTATION)));
    let mut containers: Vec<ApiContainer> = Vec::new();
    if let Some(spec) = spec {
        for c in spec.init_containers.iter().flatten() {
            let kind = if c.restart_policy.as_deref() == Some("Always") {
                ContainerKind::Sidecar
            } else {
                ContainerKind::Init
            };
            containers.push(container(c, kind, &moved));
        }
        for c in &spec.containers {
            containers.push(container(c, ContainerKind::Regular, &moved));
        }
        for c in spec.ephemeral_containers.iter().flatten() {
            containers.push(ApiContainer {
                name: c.name.clone(),
                kind: ContainerKind::Ephemeral,
                // The API refuses lifecycle hooks on ephemeral containers.
                pre_stop: None,
                spec_probes: Vec::new(),
                moved_probes: Vec::new(),
            });
        }
    }
    let condition = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == gate_type))
        .map(|c| GateCondition {
            status: ConditionStatus::parse(&c.status),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
            last_transition_time: c
                .last_transition_time
                .as_ref()
                .and_then(|t| serde_json::to_value(t).ok())
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        });
    Some(ApiPod {
        uid,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        restart_policy: match spec.and_then(|s| s.restart_policy.as_deref()) {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        },
        phase: match status.and_then(|s| s.phase.as_deref()) {
            Some("Running") => PodPhase::Running,
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            Some("Unknown") => PodPhase::Unknown,
            _ => PodPhase::Pending,
        },
        deleting: meta.deletion_timestamp.is_some(),
        grace_seconds: spec.and_then(|s| s.termination_grace_period_seconds),
        deletion_grace_seconds: meta.deletion_grace_period_seconds,
        probes_annotation: annotations
            .and_then(|a| a.get(labels::PODWARD_PROBES))
            .cloned(),
        gated: spec
            .and_then(|s| s.readiness_gates.as_ref())
            .is_some_and(|gs| gs.iter().any(|g| g.condition_type == gate_type)),
        condition,
        containers,
    })
}

/// What `podward.io/probes-moved` records as moved: the `containers` entry, container name to
/// probe field names. Anything else in it, and a record that does not parse, count as nothing
/// moved.
#[derive(Debug, Default, serde::Deserialize)]
struct MovedRecord {
    #[serde(default)]
    containers: BTreeMap<String, Vec<String>>,
}

/// The record in `value` (the annotation's text), or an empty one.
fn moved_record(value: Option<&String>) -> MovedRecord {
    value
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// The probe types `record` says moved out of container `name`, in the spec's field order.
fn moved_probes(record: &MovedRecord, name: &str) -> Vec<ProbeType> {
    let Some(fields) = record.containers.get(name) else {
        return Vec::new();
    };
    [
        ProbeType::Liveness,
        ProbeType::Readiness,
        ProbeType::Startup,
    ]
    .into_iter()
    .filter(|ty| fields.iter().any(|f| f == ty.field_name()))
    .collect()
}

fn container(c: &Container, kind: ContainerKind, moved: &MovedRecord) -> ApiContainer {
    ApiContainer {
        name: c.name.clone(),
        moved_probes: moved_probes(moved, &c.name),
        kind,
        pre_stop: c
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .map(hook),
        spec_probes: [
            (ProbeType::Liveness, c.liveness_probe.is_some()),
            (ProbeType::Readiness, c.readiness_probe.is_some()),
            (ProbeType::Startup, c.startup_probe.is_some()),
        ]
        .into_iter()
        .filter_map(|(ty, set)| set.then_some(ty))
        .collect(),
    }
}

/// A lifecycle handler as kubelet's `handlerRunner.Run` takes it: exactly one of exec, httpGet
/// and sleep; `tcpSocket` is accepted by the API but kubelet refuses to run it.
fn hook(h: &LifecycleHandler) -> Hook {
    let set = [
        h.exec.is_some(),
        h.http_get.is_some(),
        h.sleep.is_some(),
        h.tcp_socket.is_some(),
    ];
    if set.iter().filter(|s| **s).count() != 1 {
        return Hook::Invalid("invalid handler: exactly one of exec, httpGet, sleep".to_owned());
    }
    if let Some(exec) = &h.exec {
        let command = exec.command.clone().unwrap_or_default();
        if command.is_empty() {
            return Hook::Invalid("invalid handler: exec command is empty".to_owned());
        }
        return Hook::Exec { command };
    }
    if let Some(sleep) = &h.sleep {
        return match u64::try_from(sleep.seconds) {
            Ok(s) => Hook::Sleep(Duration::from_secs(s)),
            Err(_) => Hook::Invalid(format!("invalid sleep seconds: {}", sleep.seconds)),
        };
    }
    if let Some(get) = &h.http_get {
        return http_get(get);
    }
    Hook::Invalid("invalid handler: tcpSocket".to_owned())
}

/// An `httpGet` handler, defaulted and validated as an `httpGet` probe is: the annotation parser
/// is the one place that turns the API's `HTTPGetAction` into the HTTP handler's request, so the
/// hook goes through it rather than through a second copy of those rules.
fn http_get(get: &k8s_openapi::api::core::v1::HTTPGetAction) -> Hook {
    let Ok(action) = serde_json::to_value(get) else {
        return Hook::Invalid("invalid httpGet handler".to_owned());
    };
    let annotation = serde_json::json!({ "hook": { "livenessProbe": { "httpGet": action } } });
    let parsed = parse_pod_probes(&annotation.to_string());
    match parsed
        .containers
        .get("hook")
        .and_then(|c| c.liveness.as_ref())
        .map(|p| &p.handler)
    {
        Some(Handler::HttpGet(spec)) => Hook::HttpGet(spec.clone()),
        _ => Hook::Invalid(
            parsed
                .errors
                .first()
                .map(|e| format!("invalid httpGet handler: {}: {}", e.field, e.message))
                .unwrap_or_else(|| "invalid httpGet handler".to_owned()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn the_facts_cri_lacks_and_nothing_else() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "42",
                         "deletionTimestamp": "2026-11-23T10:00:00Z",
                         "annotations": {"podward.io/probes": "{}", "other": "x"}},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 45,
                "readinessGates": [{"conditionType": "example.com/x"}, {"conditionType": "podward.io/ready"}],
                "initContainers": [
                    {"name": "setup", "image": "i"},
                    {"name": "proxy", "image": "i", "restartPolicy": "Always",
                     "lifecycle": {"preStop": {"sleep": {"seconds": 3}}}}
                ],
                "containers": [
                    {"name": "app", "image": "i", "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "drain"]}}}},
                    {"name": "side", "image": "i", "lifecycle": {"preStop": {"httpGet": {"path": "/quit", "port": "admin"}}}},
                    {"name": "odd", "image": "i", "lifecycle": {"preStop": {"tcpSocket": {"port": 1}}}}
                ]
            },
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "podward.io/ready", "status": "False", "reason": "ReadinessProbeFailed",
                 "message": "m", "lastTransitionTime": "2026-11-23T09:00:00Z"}
            ]}
        }));
        let a = api_pod(&p, "podward.io/ready").expect("pod");
        assert_eq!(
            (a.uid.as_str(), a.namespace.as_str(), a.name.as_str()),
            ("u1", "shop", "web")
        );
        assert_eq!(a.resource_version, "42");
        assert_eq!(a.restart_policy, RestartPolicy::Never);
        assert_eq!(a.phase, PodPhase::Running);
        assert!(a.deleting && a.gated);
        assert_eq!(a.grace_seconds, Some(45));
        assert_eq!(a.probes_annotation.as_deref(), Some("{}"));
        assert_eq!(
            a.condition,
            Some(GateCondition {
                status: ConditionStatus::False,
                reason: "ReadinessProbeFailed".into(),
                message: "m".into(),
                last_transition_time: "2026-11-23T09:00:00Z".into(),
            })
        );
        let kinds: Vec<_> = a
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("setup", ContainerKind::Init),
                ("proxy", ContainerKind::Sidecar),
                ("app", ContainerKind::Regular),
                ("side", ContainerKind::Regular),
                ("odd", ContainerKind::Regular),
            ]
        );
        assert_eq!(
            a.pre_stop("proxy"),
            Some(&Hook::Sleep(Duration::from_secs(3)))
        );
        assert_eq!(
            a.pre_stop("app"),
            Some(&Hook::Exec {
                command: vec!["sh".into(), "-c".into(), "drain".into()]
            })
        );
        assert!(matches!(a.pre_stop("side"), Some(Hook::HttpGet(g)) if g.path == "/quit"));
        assert!(matches!(a.pre_stop("odd"), Some(Hook::Invalid(_))));
        assert_eq!(a.pre_stop("setup"), None);
        assert!(a.restarts("proxy") && !a.restarts("app"));
    }

    #[test]
    fn the_moved_record_keeps_only_probe_types_of_the_pods_containers() {
        let record = serde_json::json!({
            "containers": {"app": ["readinessProbe", "livenessProbe", "readinessProbe", "x"],
                           "proxy": ["startupProbe"], "ghost": ["livenessProbe"]},
            "readinessGate": "podward.io/ready"
        });
        let p = pod(serde_json::json!({
            "metadata": {"name": "x", "uid": "u",
                         "annotations": {"podward.io/probes-moved": record.to_string()}},
            "spec": {"initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
                     "containers": [{"name": "app"}, {"name": "db"}]}
        }));
        let a = api_pod(&p, "g").expect("pod");
        let moved: Vec<_> = a
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.moved_probes.clone()))
            .collect();
        assert_eq!(
            moved,
            vec![
                ("proxy", vec![ProbeType::Startup]),
                ("app", vec![ProbeType::Liveness, ProbeType::Readiness]),
                ("db", vec![]),
            ]
        );
        for bad in [
            "not json",
            r#"{"containers": 5}"#,
            r#"{"containers": {"app": "x"}}"#,
        ] {
            let p = pod(serde_json::json!({
                "metadata": {"name": "x", "uid": "u", "annotations": {"podward.io/probes-moved": bad}},
                "spec": {"containers": [{"name": "app"}]}
            }));
            let a = api_pod(&p, "g").expect("a bad record costs the record, not the pod");
            assert!(a.containers[0].moved_probes.is_empty(), "{bad}");
        }
    }

    #[test]
    fn no_uid_no_pod_and_a_bare_pod_gets_the_api_defaults() {
        assert!(api_pod(&pod(serde_json::json!({"metadata": {"name": "x"}})), "g").is_none());
        let a = api_pod(
            &pod(serde_json::json!({"metadata": {"name": "x", "uid": "u"}})),
            "g",
        )
        .expect("pod");
        assert_eq!(a.restart_policy, RestartPolicy::Always);
        assert_eq!(a.phase, PodPhase::Pending);
        assert!(!a.gated && !a.deleting && a.condition.is_none() && a.containers.is_empty());
    }

    #[test]
    fn a_bad_http_hook_is_invalid_not_dropped() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "x", "uid": "u"},
            "spec": {"containers": [{"name": "c", "lifecycle": {"preStop": {"httpGet": {"port": 0}}}}]}
        }));
        let a = api_pod(&p, "g").expect("pod");
        assert!(
            matches!(a.pre_stop("c"), Some(Hook::Invalid(m)) if m.contains("port")),
            "{:?}",
            a.pre_stop("c")
        );
    }
}
