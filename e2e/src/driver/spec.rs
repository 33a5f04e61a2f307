//! What a test asks the driver to run: a pod spec in kubelet's terms, reduced to what matters
//! on a node.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;

use crate::images::BUSYBOX_IMAGE;

/// The pod's restart policy (`spec.restartPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartPolicy {
    /// Restart every exited container (Kubernetes' default).
    #[default]
    Always,
    /// Restart containers that exited with a non-zero code.
    OnFailure,
    /// Never restart.
    Never,
}

impl RestartPolicy {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::Always => "Always",
            RestartPolicy::OnFailure => "OnFailure",
            RestartPolicy::Never => "Never",
        }
    }

    /// Whether a container that exited with `exit_code` is restarted.
    pub fn restarts(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Never => false,
        }
    }
}

/// A container port (`spec.containers[].ports[]`), written to the
/// `io.kubernetes.container.ports` annotation as kubelet does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPort {
    /// Port name (for named-port probes); may be empty.
    pub name: String,
    /// The port number.
    pub container_port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

/// A container's `securityContext` and memory limit, as kubelet passes them to CRI (only the
/// knobs the suites use).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityContext {
    /// `runAsUser`.
    pub run_as_user: Option<i64>,
    /// `runAsGroup`.
    pub run_as_group: Option<i64>,
    /// The pod's `supplementalGroups`.
    pub supplemental_groups: Vec<i64>,
    /// `capabilities.add` (names without `CAP_`, as in a pod spec).
    pub add_capabilities: Vec<String>,
    /// `capabilities.drop` (`ALL` drops every one).
    pub drop_capabilities: Vec<String>,
    /// `privileged` (the sandbox is made privileged too, as kubelet requires).
    pub privileged: bool,
    /// `readOnlyRootFilesystem`.
    pub readonly_rootfs: bool,
    /// `seccompProfile: RuntimeDefault` (else kubelet's default, `Unconfined`).
    pub seccomp_runtime_default: bool,
    /// `allowPrivilegeEscalation: false` (no_new_privs).
    pub no_new_privs: bool,
    /// `resources.limits.memory`, in bytes.
    pub memory_limit: Option<i64>,
}

/// One container of a [`PodSpec`].
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    /// Container name, unique in the pod.
    pub name: String,
    /// Image reference; [`BUSYBOX_IMAGE`] by default.
    pub image: String,
    /// Entrypoint override (`command`).
    pub command: Vec<String>,
    /// Arguments (`args`).
    pub args: Vec<String>,
    /// Environment variables, in order.
    pub env: Vec<(String, String)>,
    /// Declared ports.
    pub ports: Vec<ContainerPort>,
    /// Bind mounts (host path, container path), read-write.
    pub mounts: Vec<(String, String)>,
    /// Security context and memory limit.
    pub security: SecurityContext,
}

impl ContainerSpec {
    /// A busybox container running `command`.
    pub fn new(name: &str, command: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            image: BUSYBOX_IMAGE.to_owned(),
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            args: Vec::new(),
            env: Vec::new(),
            ports: Vec::new(),
            mounts: Vec::new(),
            security: SecurityContext::default(),
        }
    }

    /// Bind-mounts `host` (a directory) at `container`, read-write.
    pub fn mount(mut self, host: &str, container: &str) -> Self {
        self.mounts.push((host.to_owned(), container.to_owned()));
        self
    }

    /// Sets the security context (and memory limit).
    pub fn security(mut self, security: SecurityContext) -> Self {
        self.security = security;
        self
    }

    /// Uses `image` instead of busybox.
    pub fn image(mut self, image: &str) -> Self {
        self.image = image.to_owned();
        self
    }

    /// Sets the arguments.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Declares a TCP port (`name` may be empty).
    pub fn port(mut self, name: &str, container_port: u16) -> Self {
        self.ports.push(ContainerPort {
            name: name.to_owned(),
            container_port,
            protocol: "TCP".to_owned(),
        });
        self
    }
}

/// A pod to run through the [`crate::Driver`].
#[derive(Debug, Clone)]
pub struct PodSpec {
    /// Pod name.
    pub name: String,
    /// Namespace (`default` by default).
    pub namespace: String,
    /// Pod UID; random (UUID-shaped) by default.
    pub uid: String,
    /// Host network (the default: no CNI needed; probes target 127.0.0.1).
    pub host_network: bool,
    /// Pod labels (copied to the sandbox and every container, as kubelet does).
    pub labels: BTreeMap<String, String>,
    /// Pod annotations (reach the runtime in `PodSandboxConfig.annotations`).
    pub annotations: BTreeMap<String, String>,
    /// Restart policy for exited containers.
    pub restart_policy: RestartPolicy,
    /// `terminationGracePeriodSeconds` (30 by default).
    pub termination_grace_period_seconds: i64,
    /// The containers, started in order.
    pub containers: Vec<ContainerSpec>,
    /// Wait this long before restarting an exited container (kubelet backs off from 10 s;
    /// the default 0 restarts as soon as the exit is seen, to keep tests fast).
    pub restart_backoff: Duration,
    /// Back off restarts as kubelet does (`crate::driver::backoff`), every duration times this
    /// scale; `None`: only `restart_backoff`.
    pub kubelet_backoff: Option<f64>,
    /// cgroup parent of the sandbox; `None` uses the node's
    /// [`crate::node::TestNode::cgroup_parent`].
    pub cgroup_parent: Option<String>,
    /// Run in a pod cgroup placed as kubelet places it ([`PodSpec::kubelet_cgroups`]); ignored
    /// when `cgroup_parent` is set.
    pub kubelet_cgroups: bool,
}

impl PodSpec {
    /// A host-network pod `name` in `default`, with a random UID and no containers yet.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            namespace: "default".to_owned(),
            uid: random_uid(),
            host_network: true,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            restart_policy: RestartPolicy::Always,
            termination_grace_period_seconds: 30,
            containers: Vec::new(),
            restart_backoff: Duration::ZERO,
            kubelet_backoff: None,
            cgroup_parent: None,
            kubelet_cgroups: false,
        }
    }

    /// Adds a container.
    pub fn container(mut self, c: ContainerSpec) -> Self {
        self.containers.push(c);
        self
    }

    /// Uses the node's pod network instead of the host's (needs `containernetworking-plugins`;
    /// see [`crate::node::TestNode::pod_subnet`]).
    pub fn pod_network(mut self) -> Self {
        self.host_network = false;
        self
    }

    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = ns.to_owned();
        self
    }

    /// Sets the UID.
    pub fn uid(mut self, uid: &str) -> Self {
        self.uid = uid.to_owned();
        self
    }

    /// Adds a pod label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Adds a pod annotation (e.g. `podward.io/probes`).
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Sets the restart policy.
    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        self.restart_policy = policy;
        self
    }

    /// Sets `terminationGracePeriodSeconds`.
    pub fn grace_period(mut self, seconds: i64) -> Self {
        self.termination_grace_period_seconds = seconds;
        self
    }

    /// Backs off restarts as kubelet does (client-go's `flowcontrol.Backoff`, 10 s initial,
    /// 300 s cap, keyed per pod and container), every duration times `scale` (1.0: kubelet's).
    pub fn kubelet_backoff(mut self, scale: f64) -> Self {
        self.kubelet_backoff = Some(scale);
        self
    }

    /// Sets the delay before restarting an exited container.
    pub fn restart_backoff(mut self, d: Duration) -> Self {
        self.restart_backoff = d;
        self
    }

    /// Sets the sandbox's cgroup parent (e.g. a kubelet-style `…/pod<uid>`).
    pub fn cgroup_parent(mut self, parent: &str) -> Self {
        self.cgroup_parent = Some(parent.to_owned());
        self
    }
}

/// A random UUID v4 string, like the API server assigns.
fn random_uid() -> String {
    let b: [u8; 16] = rand::rng().random();
    let h = hex::encode(b);
    format!(
        "{}-{}-4{}-{}{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        ["8", "9", "a", "b"][usize::from(b[8] & 3)],
        &h[17..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_uuid_shaped_and_distinct() {
        let a = random_uid();
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
        assert_ne!(a, random_uid());
    }

    #[test]
    fn restart_policy_decisions() {
        assert!(RestartPolicy::Always.restarts(0));
        assert!(RestartPolicy::OnFailure.restarts(1));
        assert!(!RestartPolicy::OnFailure.restarts(0));
        assert!(!RestartPolicy::Never.restarts(1));
    }
}
