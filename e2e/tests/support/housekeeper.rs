//! Shared by the housekeeper e2e tests: a housekeeper config pointed at a [`TestNode`], and
//! kubelet-style pod cgroups (`<node parent>/kubepods/burstable/pod<uid>`) in the real v1
//! hierarchies and the v2 mount, with real processes inside, removed on drop.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use podward_e2e::TestNode;
use podward_housekeeper::Config;

/// Hierarchies the tests put pod cgroups in (cpuset is left out: it needs cpus/mems set).
pub const HIERARCHIES: [&str; 5] = ["cpu", "memory", "pids", "freezer", "unified"];

/// A housekeeper config for `node`: its containerd, temp kubelet and log roots, the real cgroup
/// filesystem under the node's unique cgroup parent, zero grace, acting (not the dry-run default),
/// and a timer that never fires again after the first pass (tests drive passes themselves).
pub fn config(node: &TestNode) -> Config {
    let dir = node.dir();
    std::fs::create_dir_all(dir.join("kubelet/pods")).expect("kubelet pods dir");
    std::fs::create_dir_all(dir.join("logs")).expect("log root");
    Config {
        socket: dir.join("housekeeper.sock"),
        shim_socket: dir.join("shim.sock"),
        prober_socket: dir.join("prober.sock"),
        common: podward_api::daemon::config::Common {
            containerd_socket: node.containerd_socket(),
            ..podward_api::daemon::config::Common::with_admin_port(0)
        },
        cgroup_root: "/sys/fs/cgroup".into(),
        kubelet_cgroup_root: node.cgroup_parent().to_owned(),
        kubelet_root: dir.join("kubelet"),
        log_root: dir.join("logs"),
        mountinfo: "/proc/self/mountinfo".into(),
        interval: Duration::from_secs(3600),
        orphan_grace: Duration::ZERO,
        dry_run: false,
        ..Config::default()
    }
}

/// `kubepods` under the node's cgroup parent in every test hierarchy, as kubelet creates it at
/// start. A node that runs pods without it fails the housekeeper's cgroups source ("no pod cgroup
/// root", docs/housekeeper.md); tests whose pods are not in kubelet-style cgroups create it. The
/// node's cleanup removes it with the parent's tree.
pub fn kubelet_pod_root(node: &TestNode) {
    let rel = format!("{}/kubepods", node.cgroup_parent().trim_start_matches('/'));
    for h in HIERARCHIES {
        let p = Path::new("/sys/fs/cgroup").join(h).join(&rel);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
    }
}

/// `kubepods/burstable/pod<uid>` under the node's cgroup parent, as kubelet names it.
pub fn pod_cgroup_rel(node: &TestNode, uid: &str) -> String {
    format!(
        "{}/kubepods/burstable/pod{uid}",
        node.cgroup_parent().trim_start_matches('/')
    )
}

/// A pod cgroup in every test hierarchy; dropping it kills its processes and removes it.
pub struct PodCgroup {
    pub rel: String,
    pub children: Vec<Child>,
}

impl PodCgroup {
    pub fn create(node: &TestNode, uid: &str) -> Self {
        let rel = pod_cgroup_rel(node, uid);
        for h in HIERARCHIES {
            let p = Path::new("/sys/fs/cgroup").join(h).join(&rel);
            std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        }
        Self {
            rel,
            children: Vec::new(),
        }
    }

    pub fn paths(&self) -> Vec<PathBuf> {
        HIERARCHIES
            .iter()
            .map(|h| Path::new("/sys/fs/cgroup").join(h).join(&self.rel))
            .collect()
    }

    pub fn exists_anywhere(&self) -> bool {
        self.paths().iter().any(|p| p.exists())
    }

    /// Starts `sleep` and moves it into the pod cgroup in every hierarchy.
    pub fn spawn_sleeper(&mut self) -> i32 {
        let child = Command::new("sleep")
            .arg("3600")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        for p in self.paths() {
            std::fs::write(p.join("cgroup.procs"), pid.to_string())
                .unwrap_or_else(|e| panic!("move {pid} into {}: {e}", p.display()));
        }
        self.children.push(child);
        pid
    }

    /// Reaps children that were killed (so `alive` sees the truth, not a zombie).
    pub fn alive(&mut self, pid: i32) -> bool {
        for c in &mut self.children {
            if c.id() as i32 == pid {
                return matches!(c.try_wait(), Ok(None));
            }
        }
        false
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for p in self.paths() {
            let _ = std::fs::remove_dir(p);
        }
    }
}

/// A pod dir and a log dir for `uid` in the node's temp kubelet and log roots.
pub fn leave_dirs(config: &Config, uid: &str) -> (PathBuf, PathBuf) {
    let pod = config.kubelet_root.join("pods").join(uid);
    std::fs::create_dir_all(pod.join("volumes/kubernetes.io~empty-dir/cache")).expect("pod dir");
    std::fs::create_dir_all(pod.join("containers/app")).expect("pod dir");
    std::fs::write(pod.join("etc-hosts"), "127.0.0.1 localhost\n").expect("etc-hosts");
    let log = config.log_root.join(format!("default_gone_{uid}"));
    std::fs::create_dir_all(log.join("app")).expect("log dir");
    std::fs::write(log.join("app/0.log"), "bye\n").expect("log file");
    (pod, log)
}

/// Acting passes until one acts (each checked by `check` first, within a minute); that pass's
/// plan, asserted to have removed `uid`'s cgroup, pod dir and log dir, in kubelet's order.
pub async fn act_until_orphan_removed(
    rec: &podward_housekeeper::reconcile::Reconciler<
        podward_housekeeper::sources::NodeSources,
        podward_housekeeper::act::NodeActuator,
    >,
    uid: &str,
    check: impl Fn(&podward_api::housekeeper::v1::Plan),
) -> podward_api::housekeeper::v1::Plan {
    use podward_api::housekeeper::v1::{ActionKind, Outcome};
    use podward_housekeeper::reconcile::Mode;

    let mut acted = None;
    podward_api::test_util::eventually(
        "the orphan to be acted on",
        Duration::from_secs(60),
        async || {
            let (p, _) = rec.pass(Mode::Act).await;
            check(&p);
            let done = !p.actions.is_empty();
            if done {
                acted = Some(p);
            }
            done
        },
    )
    .await;
    let p = acted.expect("plan");
    let kinds: Vec<_> = p
        .actions
        .iter()
        .map(|a| (a.kind(), a.pod_uid.as_str(), a.outcome()))
        .collect();
    assert_eq!(
        kinds,
        [
            (ActionKind::RemoveCgroup, uid, Outcome::Done),
            (ActionKind::RemovePodDir, uid, Outcome::Done),
            (ActionKind::RemoveLogDir, uid, Outcome::Done),
        ],
        "{:?}",
        p.actions
    );
    p
}
