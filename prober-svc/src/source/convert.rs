//! Wire objects (shim Lifecycle, CRI) into the prober's model. Annotations are hostile input:
//! anything unparsable degrades to "absent", never to a panic.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use podward_api::labels;
use podward_api::shim::v1 as shim;

use super::index::SandboxRec;
use crate::model::container_port::{ContainerPort, parse_ports_annotation};
use crate::model::{ContainerInfo, RunState};

/// The probe address of a sandbox: its pod IP, or `node_ip` for a host-network sandbox.
pub fn probe_ip(pod_ip: &str, host_network: bool, node_ip: IpAddr) -> Option<IpAddr> {
    if host_network {
        return Some(node_ip);
    }
    pod_ip.parse().ok()
}

/// Ports from the `io.kubernetes.container.ports` annotation (empty when missing or invalid).
pub fn ports(annotations: &HashMap<String, String>) -> Arc<[ContainerPort]> {
    match annotations.get(labels::CONTAINER_PORTS) {
        Some(json) => parse_ports_annotation(json).unwrap_or_else(|e| {
            tracing::debug!(error = %e, "ignoring the container ports annotation");
            Vec::new()
        }),
        None => Vec::new(),
    }
    .into()
}

/// The pod grace period from the container annotation, if present and numeric.
pub fn pod_grace(annotations: &HashMap<String, String>) -> Option<i64> {
    annotations
        .get(labels::POD_TERMINATION_GRACE_PERIOD)
        .and_then(|v| v.trim().parse().ok())
}

/// A shim sandbox.
pub fn shim_sandbox(s: &shim::Sandbox, node_ip: IpAddr) -> SandboxRec {
    SandboxRec {
        id: s.id.clone(),
        uid: s.uid.clone(),
        name: s.name.clone(),
        namespace: s.namespace.clone(),
        created_at_ns: s.created_at_ns,
        ip: probe_ip(&s.pod_ip, s.host_network, node_ip),
        probes: s.annotations.get(labels::PODWARD_PROBES).cloned(),
        stop_requested_at_ns: s.stop_requested_at_ns,
    }
}

/// A shim container (with its pod UID).
pub fn shim_container(c: &shim::Container) -> (String, ContainerInfo) {
    let state = match shim::ContainerState::try_from(c.state) {
        Ok(shim::ContainerState::Created) => RunState::Created,
        Ok(shim::ContainerState::Running) => RunState::Running,
        Ok(shim::ContainerState::Exited) => RunState::Exited,
        _ => RunState::Unknown,
    };
    let uid = if c.pod_uid.is_empty() {
        c.labels.get(labels::POD_UID).cloned().unwrap_or_default()
    } else {
        c.pod_uid.clone()
    };
    let info = ContainerInfo {
        id: c.id.as_str().into(),
        name: c.name.clone(),
        attempt: c.attempt,
        state,
        created_at_ns: c.created_at_ns,
        started_at_ns: c.started_at_ns,
        ports: ports(&c.annotations),
        env: c
            .envs
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect::<Vec<_>>()
            .into(),
        pod_grace_seconds: pod_grace(&c.annotations),
        stop_requested_at_ns: c.stop_requested_at_ns,
    };
    (uid, info)
}

/// A CRI container state.
pub fn cri_state(state: i32) -> RunState {
    use podward_api::cri::ContainerState as S;
    match S::try_from(state) {
        Ok(S::ContainerCreated) => RunState::Created,
        Ok(S::ContainerRunning) => RunState::Running,
        Ok(S::ContainerExited) => RunState::Exited,
        _ => RunState::Unknown,
    }
}

/// Environment from a verbose `ContainerStatus` info map: containerd puts the OCI runtime spec
/// under `info` → `runtimeSpec`; its `process.env` is `KEY=VALUE` in declaration order.
pub fn env_from_verbose_info(info: &HashMap<String, String>) -> Vec<(String, String)> {
    let Some(raw) = info.get("info") else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(raw) else {
        return Vec::new();
    };
    let Some(spec) = v.get("runtimeSpec").cloned() else {
        return Vec::new();
    };
    let spec = match serde_json::from_value::<oci_spec::runtime::Spec>(spec) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "unreadable runtime spec in ContainerStatus info");
            return Vec::new();
        }
    };
    spec.process()
        .as_ref()
        .and_then(|p| p.env().clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_annotations_degrade_to_absent() {
        let mut a = HashMap::new();
        a.insert(labels::CONTAINER_PORTS.to_owned(), "{not json".to_owned());
        a.insert(
            labels::POD_TERMINATION_GRACE_PERIOD.to_owned(),
            "soon".to_owned(),
        );
        assert!(ports(&a).is_empty());
        assert_eq!(pod_grace(&a), None);
        a.insert(
            labels::POD_TERMINATION_GRACE_PERIOD.to_owned(),
            "45".to_owned(),
        );
        assert_eq!(pod_grace(&a), Some(45));
    }

    #[test]
    fn host_network_uses_node_ip() {
        let node: IpAddr = "10.0.0.5".parse().expect("ip");
        assert_eq!(probe_ip("", true, node), Some(node));
        assert_eq!(probe_ip("", false, node), None);
        assert_eq!(probe_ip("10.1.2.3", false, node), "10.1.2.3".parse().ok());
    }

    #[test]
    fn env_comes_from_the_runtime_spec() {
        let spec = r#"{"runtimeSpec":{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"cwd":"/","args":["sh"],"env":["A=1","B=x=y"]},"root":{"path":"rootfs"}}}"#;
        let mut info = HashMap::new();
        info.insert("info".to_owned(), spec.to_owned());
        assert_eq!(
            env_from_verbose_info(&info),
            vec![("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        info.insert("info".to_owned(), "garbage".to_owned());
        assert!(env_from_verbose_info(&info).is_empty());
    }
}
