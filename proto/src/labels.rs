//! Label and annotation keys that kubelet writes on CRI objects, and podward's own.
//!
//! Kubelet's keys come from `pkg/kubelet/types/labels.go` and `pkg/kubelet/kuberuntime/labels.go`.

/// Sandbox and container label: the pod's name.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// Sandbox and container label: the pod's namespace.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Sandbox and container label: the pod's UID.
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// Container label: the container's name in the pod spec.
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Sandbox label kubelet sets on every sandbox it creates.
pub const KUBERNETES_MANAGED: &str = "io.kubernetes.docker.type";

/// Container annotation: JSON list of the container's ports (`[{"name":..,"containerPort":..}]`).
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
/// Container annotation: how many times kubelet restarted this container.
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
/// Container annotation: hash of the container spec.
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
/// Container annotation: the container's termination message path.
pub const CONTAINER_TERMINATION_MESSAGE_PATH: &str =
    "io.kubernetes.container.terminationMessagePath";
/// Container annotation: the pod's termination grace period in seconds.
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Container annotation: the pod's deletion grace period (set once the pod is being deleted).
pub const POD_DELETION_GRACE_PERIOD: &str = "io.kubernetes.pod.deletionGracePeriod";
/// Sandbox label written by podward's e2e driver (not kubelet) to record the restart policy.
pub const POD_RESTART_POLICY: &str = "podward.io/restart-policy";

/// Pod annotation (reaches the runtime in `PodSandboxConfig.annotations`): probes by container.
pub const PODWARD_PROBES: &str = "podward.io/probes";
/// Static pods: the annotation that carries their config hash (their UID).
pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";
/// Mirror pods: the annotation naming the static pod they mirror.
pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";

/// containerd's CRI namespace.
pub const CONTAINERD_K8S_NAMESPACE: &str = "k8s.io";
