//! CRI messages to `podward.shim.v1` index entries.

use std::collections::HashMap;

use podward_api::cri;
use podward_api::labels;
use podward_api::shim::v1::{Container, ContainerState, Delivery, KeyValue, Sandbox, SandboxState};

/// CRI `NamespaceMode::NODE`: the sandbox shares the host's network namespace.
const NAMESPACE_MODE_NODE: i32 = cri::NamespaceMode::Node as i32;

/// CRI sandbox state to ours.
pub(super) fn sandbox_state(cri_state: i32) -> i32 {
    match cri::PodSandboxState::try_from(cri_state) {
        Ok(cri::PodSandboxState::SandboxReady) => SandboxState::Ready as i32,
        Ok(cri::PodSandboxState::SandboxNotready) => SandboxState::Notready as i32,
        Err(_) => SandboxState::Unspecified as i32,
    }
}

/// CRI container state to ours.
pub(super) fn container_state(cri_state: i32) -> i32 {
    match cri::ContainerState::try_from(cri_state) {
        Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created as i32,
        Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running as i32,
        Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited as i32,
        Ok(cri::ContainerState::ContainerUnknown) | Err(_) => ContainerState::Unknown as i32,
    }
}

fn host_network(config: &cri::PodSandboxConfig) -> bool {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .is_some_and(|n| n.network == NAMESPACE_MODE_NODE)
}

/// A new sandbox from a successful RunPodSandbox.
pub(super) fn sandbox_from_run(
    id: String,
    config: cri::PodSandboxConfig,
    runtime_handler: String,
    delivery: Delivery,
    at_ns: i64,
) -> Sandbox {
    let host_network = host_network(&config);
    let md = config.metadata.unwrap_or_default();
    Sandbox {
        id,
        name: md.name,
        namespace: md.namespace,
        uid: md.uid,
        attempt: md.attempt,
        state: SandboxState::Ready as i32,
        labels: config.labels,
        annotations: config.annotations,
        pod_ip: String::new(),
        additional_ips: Vec::new(),
        host_network,
        created_at_ns: at_ns,
        runtime_handler,
        run_delivery: delivery as i32,
        stop_requested_at_ns: 0,
        truncated: false,
    }
}

/// A sandbox as a ListPodSandbox response describes it (no IP, no network mode).
pub(super) fn sandbox_from_list(p: cri::PodSandbox) -> Sandbox {
    let md = p.metadata.unwrap_or_default();
    Sandbox {
        id: p.id,
        name: md.name,
        namespace: md.namespace,
        uid: md.uid,
        attempt: md.attempt,
        state: sandbox_state(p.state),
        labels: p.labels,
        annotations: p.annotations,
        created_at_ns: p.created_at,
        runtime_handler: p.runtime_handler,
        ..Sandbox::default()
    }
}

/// A sandbox as a PodSandboxStatus response describes it.
pub(super) fn sandbox_from_status(s: cri::PodSandboxStatus, host_net: Option<bool>) -> Sandbox {
    let md = s.metadata.unwrap_or_default();
    let (pod_ip, additional_ips) = match s.network {
        Some(n) => (n.ip, n.additional_ips.into_iter().map(|i| i.ip).collect()),
        None => (String::new(), Vec::new()),
    };
    let host_network = host_net.unwrap_or_else(|| {
        s.linux
            .as_ref()
            .and_then(|l| l.namespaces.as_ref())
            .and_then(|n| n.options.as_ref())
            .is_some_and(|o| o.network == NAMESPACE_MODE_NODE)
    });
    Sandbox {
        id: s.id,
        name: md.name,
        namespace: md.namespace,
        uid: md.uid,
        attempt: md.attempt,
        state: sandbox_state(s.state),
        labels: s.labels,
        annotations: s.annotations,
        pod_ip,
        additional_ips,
        host_network,
        created_at_ns: s.created_at,
        runtime_handler: s.runtime_handler,
        ..Sandbox::default()
    }
}

fn pod_uid(labels: &HashMap<String, String>) -> String {
    labels.get(labels::POD_UID).cloned().unwrap_or_default()
}

/// A new container from a successful CreateContainer.
pub(super) fn container_from_create(
    id: String,
    sandbox_id: String,
    config: cri::ContainerConfig,
    delivery: Delivery,
    at_ns: i64,
) -> Container {
    let md = config.metadata.unwrap_or_default();
    Container {
        id,
        sandbox_id,
        pod_uid: pod_uid(&config.labels),
        name: md.name,
        attempt: md.attempt,
        state: ContainerState::Created as i32,
        image: config.image.map(|i| i.image).unwrap_or_default(),
        labels: config.labels,
        annotations: config.annotations,
        envs: config
            .envs
            .into_iter()
            .map(|kv| KeyValue {
                key: kv.key,
                value: kv.value,
            })
            .collect(),
        created_at_ns: at_ns,
        create_delivery: delivery as i32,
        ..Container::default()
    }
}

/// A container as a ListContainers response describes it.
pub(super) fn container_from_list(c: cri::Container) -> Container {
    let md = c.metadata.unwrap_or_default();
    Container {
        pod_uid: pod_uid(&c.labels),
        id: c.id,
        sandbox_id: c.pod_sandbox_id,
        name: md.name,
        attempt: md.attempt,
        state: container_state(c.state),
        image: c.image.map(|i| i.image).unwrap_or_default(),
        labels: c.labels,
        annotations: c.annotations,
        created_at_ns: c.created_at,
        ..Container::default()
    }
}

/// A container as a ContainerStatus response describes it (no sandbox ID, no env).
pub(super) fn container_from_status(s: cri::ContainerStatus) -> Container {
    let md = s.metadata.unwrap_or_default();
    Container {
        pod_uid: pod_uid(&s.labels),
        id: s.id,
        name: md.name,
        attempt: md.attempt,
        state: container_state(s.state),
        image: s.image.map(|i| i.image).unwrap_or_default(),
        labels: s.labels,
        annotations: s.annotations,
        created_at_ns: s.created_at,
        started_at_ns: s.started_at,
        finished_at_ns: s.finished_at,
        exit_code: s.exit_code,
        reason: s.reason,
        message: s.message,
        ..Container::default()
    }
}

/// Environment pairs to the wire type.
pub(super) fn envs(pairs: Vec<(String, String)>) -> Vec<KeyValue> {
    pairs
        .into_iter()
        .map(|(key, value)| KeyValue { key, value })
        .collect()
}
