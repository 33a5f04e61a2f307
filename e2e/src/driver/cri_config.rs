//! Kubelet-shaped CRI configs: the labels, annotations and paths kubelet would send.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;

use podward_api::cri::{
    Capability, ContainerConfig, ContainerMetadata, ImageSpec, Int64Value, KeyValue,
    LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, SecurityProfile, security_profile::ProfileType,
};
use podward_api::labels;
use serde_json::json;

use super::spec::{ContainerSpec, PodSpec};
use crate::error::HarnessError;
use crate::node::TestNode;

impl PodSpec {
    /// The `RunPodSandbox` config kubelet would send for this pod on `node` (its cgroup parent
    /// unless the spec overrides it or asks for kubelet's pod cgroup, which is then created in
    /// every hierarchy), with the log directory created. [`crate::Driver::run_pod`]
    /// uses it; tests that drive CRI calls by hand use it too, so every sandbox in the suite is
    /// kubelet-shaped in one place.
    pub fn sandbox_config(&self, node: &TestNode) -> Result<PodSandboxConfig, HarnessError> {
        let log_dir = log_directory(node.dir(), self);
        std::fs::create_dir_all(&log_dir).map_err(HarnessError::io("create", &log_dir))?;
        let cgroup_parent = match &self.cgroup_parent {
            Some(p) => p.clone(),
            None if self.kubelet_cgroups => {
                let p = super::pod_cgroup::kubelet_cgroup_parent(node.cgroup_parent(), self);
                super::pod_cgroup::ensure(Path::new(crate::cleanup::CGROUP_ROOT), &p)?;
                p
            }
            None => node.cgroup_parent().to_owned(),
        };
        Ok(sandbox_config(node.dir(), &cgroup_parent, self))
    }
}

/// Where kubelet would put the pod's logs: `<node dir>/logs/<ns>_<name>_<uid>`.
fn log_directory(node_dir: &Path, spec: &PodSpec) -> std::path::PathBuf {
    node_dir
        .join("logs")
        .join(format!("{}_{}_{}", spec.namespace, spec.name, spec.uid))
}

/// Namespaces as kubelet sets them: host or pod network, container PID, pod IPC.
fn namespaces(spec: &PodSpec) -> NamespaceOption {
    NamespaceOption {
        network: if spec.host_network {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        } as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// The sandbox labels kubelet writes (plus the restart policy, for the driver's own use).
fn pod_labels(spec: &PodSpec) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = spec.labels.clone().into_iter().collect();
    l.insert(labels::POD_NAME.into(), spec.name.clone());
    l.insert(labels::POD_NAMESPACE.into(), spec.namespace.clone());
    l.insert(labels::POD_UID.into(), spec.uid.clone());
    l.insert(labels::KUBERNETES_MANAGED.into(), "podsandbox".into());
    l.insert(
        labels::POD_RESTART_POLICY.into(),
        spec.restart_policy.as_str().into(),
    );
    l
}

/// `RunPodSandbox`'s config.
fn sandbox_config(node_dir: &Path, cgroup_parent: &str, spec: &PodSpec) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: spec.name.clone(),
            uid: spec.uid.clone(),
            namespace: spec.namespace.clone(),
            attempt: 0,
        }),
        // As kubelet: a host-network pod shares the node's UTS namespace, so no hostname
        // (runc refuses to set one without a private UTS namespace).
        hostname: if spec.host_network {
            String::new()
        } else {
            spec.name.clone()
        },
        log_directory: log_directory(node_dir, spec).to_string_lossy().into_owned(),
        labels: pod_labels(spec),
        annotations: spec.annotations.clone().into_iter().collect(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.to_owned(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(spec)),
                privileged: spec.containers.iter().any(|c| c.security.privileged),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `CreateContainer`'s config for restart `attempt` of `c`.
pub(crate) fn container_config(spec: &PodSpec, c: &ContainerSpec, attempt: u32) -> ContainerConfig {
    let mut l: HashMap<String, String> = spec.labels.clone().into_iter().collect();
    l.insert(labels::POD_NAME.into(), spec.name.clone());
    l.insert(labels::POD_NAMESPACE.into(), spec.namespace.clone());
    l.insert(labels::POD_UID.into(), spec.uid.clone());
    l.insert(labels::CONTAINER_NAME.into(), c.name.clone());
    let mut a = HashMap::new();
    a.insert(labels::CONTAINER_RESTART_COUNT.into(), attempt.to_string());
    a.insert(labels::CONTAINER_HASH.into(), container_hash(c));
    a.insert(
        labels::POD_TERMINATION_GRACE_PERIOD.into(),
        spec.termination_grace_period_seconds.to_string(),
    );
    a.insert(
        labels::CONTAINER_TERMINATION_MESSAGE_PATH.into(),
        "/dev/termination-log".into(),
    );
    if !c.ports.is_empty() {
        let ports: Vec<_> = c
            .ports
            .iter()
            .map(|p| {
                let mut v = json!({"containerPort": p.container_port, "protocol": p.protocol});
                if !p.name.is_empty() {
                    v["name"] = json!(p.name);
                }
                v
            })
            .collect();
        a.insert(labels::CONTAINER_PORTS.into(), json!(ports).to_string());
    }
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: c.name.clone(),
            attempt,
        }),
        image: Some(ImageSpec {
            image: c.image.clone(),
            ..Default::default()
        }),
        command: c.command.clone(),
        args: c.args.clone(),
        envs: c
            .env
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        labels: l,
        annotations: a,
        mounts: c
            .mounts
            .iter()
            .map(|(host, container)| Mount {
                host_path: host.clone(),
                container_path: container.clone(),
                ..Default::default()
            })
            .collect(),
        log_path: format!("{}/{attempt}.log", c.name),
        linux: Some(LinuxContainerConfig {
            security_context: Some(security_context(spec, c)),
            resources: c.security.memory_limit.map(|m| LinuxContainerResources {
                memory_limit_in_bytes: m,
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// The container's security context as kubelet's `determineEffectiveSecurityContext` sends it
/// (seccomp `Unconfined` unless asked, as with kubelet's `seccompDefault` off).
fn security_context(spec: &PodSpec, c: &ContainerSpec) -> LinuxContainerSecurityContext {
    let s = &c.security;
    LinuxContainerSecurityContext {
        namespace_options: Some(namespaces(spec)),
        run_as_user: s.run_as_user.map(|value| Int64Value { value }),
        run_as_group: s.run_as_group.map(|value| Int64Value { value }),
        supplemental_groups: s.supplemental_groups.clone(),
        capabilities: (!s.add_capabilities.is_empty() || !s.drop_capabilities.is_empty()).then(
            || Capability {
                add_capabilities: s.add_capabilities.clone(),
                drop_capabilities: s.drop_capabilities.clone(),
                ..Default::default()
            },
        ),
        privileged: s.privileged,
        readonly_rootfs: s.readonly_rootfs,
        no_new_privs: s.no_new_privs,
        seccomp: Some(SecurityProfile {
            profile_type: if s.seccomp_runtime_default {
                ProfileType::RuntimeDefault
            } else {
                ProfileType::Unconfined
            } as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A stable hash of the container spec, in hex (kubelet's `io.kubernetes.container.hash`).
fn container_hash(c: &ContainerSpec) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&c.name, &c.image, &c.command, &c.args, &c.env).hash(&mut h);
    for p in &c.ports {
        (&p.name, p.container_port, &p.protocol).hash(&mut h);
    }
    format!("{:x}", h.finish() & 0xffff_ffff)
}
