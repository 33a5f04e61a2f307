//! The demo's two pods: `default/demo`, running, probed and gated; `default/old-job`, the
//! orphan kubelet left behind.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use podward_e2e::apiserver::pod_object;
use podward_e2e::{ContainerSpec, Pod, PodSpec, free_port, kubelet_cgroup_parent};
use serde_json::json;

use crate::stack::{NODE_NAME, Stack};

/// The condition type the prober owns for gated pods (its default `--readiness-gate-condition`).
pub(crate) const GATE: &str = "podward.io/ready";

/// The running demo pod and where its preStop hook leaves its mark.
pub(crate) struct DemoPod {
    /// The pod, run by the driver through the shim.
    pub(crate) pod: Pod,
    /// Touched by `flaky`'s preStop hook (a host directory mounted in the container).
    pub(crate) hook_file: PathBuf,
}

/// What is left of `default/old-job`.
pub(crate) struct Orphan {
    /// Its pod UID.
    pub(crate) uid: String,
    /// Its pod cgroup (in the memory hierarchy; it is in every hierarchy).
    pub(crate) cgroup: PathBuf,
    /// `<kubelet root>/pods/<uid>`.
    pub(crate) pod_dir: PathBuf,
    /// `<log root>/default_old-job_<uid>`.
    pub(crate) log_dir: PathBuf,
}

impl Orphan {
    /// Which of its cgroup, pod dir and log dir still exist.
    pub(crate) fn remains(&self) -> [(&'static str, bool); 3] {
        [
            ("cgroup", self.cgroup.exists()),
            ("pod dir", self.pod_dir.exists()),
            ("log dir", self.log_dir.exists()),
        ]
    }
}

/// The pod's cgroup directory in the memory hierarchy (kubelet's cgroupfs layout).
pub(crate) fn cgroup_of(stack: &Stack, spec: &PodSpec) -> PathBuf {
    Path::new("/sys/fs/cgroup/memory")
        .join(kubelet_cgroup_parent(stack.node.cgroup_parent(), spec).trim_start_matches('/'))
}

/// The pod directory kubelet makes before it starts a pod (`<root>/pods/<uid>`): containers'
/// termination logs, a volume, the plugins dir, the generated `/etc/hosts`.
fn make_pod_dir(kubelet_root: &Path, spec: &PodSpec) -> Result<PathBuf> {
    let dir = kubelet_root.join("pods").join(&spec.uid);
    for c in &spec.containers {
        std::fs::create_dir_all(dir.join("containers").join(&c.name))
            .with_context(|| format!("create {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir.join("volumes/kubernetes.io~empty-dir/cache"))
        .with_context(|| format!("create {}", dir.display()))?;
    std::fs::create_dir_all(dir.join("plugins")).context("create the plugins dir")?;
    std::fs::write(dir.join("etc-hosts"), "127.0.0.1\tlocalhost\n").context("write etc-hosts")?;
    Ok(dir)
}

/// Runs `default/old-job` in a kubelet pod cgroup with its pod directory, then deletes it from
/// the runtime as kubelet does (stop, remove) but leaves what kubelet would clean up next.
pub(crate) async fn leave_orphan(stack: &Stack) -> Result<Orphan> {
    let spec = PodSpec::new("old-job")
        .grace_period(1)
        .kubelet_cgroups()
        .container(ContainerSpec::new(
            "job",
            &["sh", "-c", "echo job done; exec sleep 3600"],
        ));
    let pod_dir = make_pod_dir(&stack.paths.kubelet_root, &spec)?;
    let cgroup = cgroup_of(stack, &spec);
    let uid = spec.uid.clone();
    let pod = stack
        .driver
        .run_pod(&stack.node, spec)
        .await
        .context("run pod old-job")?;
    pod.delete().await.context("delete pod old-job")?;
    Ok(Orphan {
        log_dir: stack.paths.log_root.join(format!("default_old-job_{uid}")),
        uid,
        cgroup,
        pod_dir,
    })
}

/// The demo pod's containers whose probes are all exec probes.
pub(crate) const EXEC_PROBED: &[&str] = &["flaky"];

/// Runs `default/demo` (see the crate docs) and registers it in the API server, bound to the
/// demo's node with the readiness gate and `flaky`'s preStop hook.
pub(crate) async fn run_demo_pod(stack: &Stack) -> Result<DemoPod> {
    let port = free_port();
    let hooks = stack.node.dir().join("hooks");
    std::fs::create_dir_all(&hooks).context("create the hooks dir")?;
    let probes = json!({
        "web": {
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 2},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": port},
                               "periodSeconds": 1, "failureThreshold": 2}
        },
        "flaky": {
            "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]},
                              "periodSeconds": 2, "failureThreshold": 1},
            "readinessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 2}
        }
    });
    // The ready file goes away 8 s after start for 6 s, and again every 14 s.
    let web = format!(
        "mkdir -p /www; echo ok > /www/healthz; echo ok > /www/ready; \
         (while true; do sleep 8; rm -f /www/ready; sleep 6; echo ok > /www/ready; done) & \
         exec httpd -f -p 127.0.0.1:{port} -h /www"
    );
    let hooks_str = hooks.to_str().context("the node dir is not UTF-8")?;
    let spec = PodSpec::new("demo")
        .annotation(podward_api::labels::PODWARD_PROBES, &probes.to_string())
        .grace_period(3)
        .kubelet_cgroups()
        .container(ContainerSpec::new("web", &["sh", "-c", &web]).port("http", port))
        .container(
            ContainerSpec::new(
                "flaky",
                &[
                    "sh",
                    "-c",
                    "touch /tmp/healthy; sleep 10; rm /tmp/healthy; exec sleep 3600",
                ],
            )
            .mount(hooks_str, "/hooks"),
        );
    make_pod_dir(&stack.paths.kubelet_root, &spec)?;
    let mut obj = pod_object(&spec, NODE_NAME);
    obj["spec"]["readinessGates"] = json!([{ "conditionType": GATE }]);
    // `flaky` is the second container; the hook takes one of the pod's 3 s of grace.
    obj["spec"]["containers"][1]["lifecycle"] = json!({"preStop": {"exec": {"command":
        ["sh", "-c", "touch /hooks/flaky-prestop; sleep 1"]}}});
    stack.api.put_pod(obj);
    let pod = stack
        .driver
        .run_pod(&stack.node, spec)
        .await
        .context("run pod demo")?;
    Ok(DemoPod {
        pod,
        hook_file: hooks.join("flaky-prestop"),
    })
}
