//! The systemd cgroup driver against a real systemd: a private `systemd --user` manager with its
//! own D-Bus bus (support/user_systemd.rs), pod slices and `cri-containerd-*.scope`s made the way
//! kubelet and runc make them, real processes inside.
//!
//! What must happen: the orphan's processes are killed first, then systemd stops its slice
//! (`StopUnit`, job waited for, `ResetFailedUnit`) and its cgroups go; a slice systemd does not
//! know falls back to cgroupfs and the action's evidence says so; without the bus nothing is
//! killed or removed. What must not: the sibling pod, its process, the QoS parent slice.

#[path = "support/fake_cri.rs"]
#[allow(dead_code)]
mod fake_cri;
#[path = "support/real_cgroups.rs"]
mod real_cgroups;
#[path = "support/user_systemd.rs"]
mod user_systemd;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use podward_api::cri::{CgroupDriver as CriCgroupDriver, PodSandbox, PodSandboxMetadata};
use podward_api::housekeeper::v1::{ActionKind, Outcome};
use podward_api::test_util::eventually;
use podward_housekeeper::act::{Actuator, NodeActuator};
use podward_housekeeper::config::{Config, DriverName};
use podward_housekeeper::node::cgroup::systemd::{SystemdClient, SystemdError};
use podward_housekeeper::node::cgroup::{
    CgroupDriver, CgroupError, CgroupLayout, DriverFlag, FoundBy, PodCgroup, RuntimeAnswer,
    decide_driver, scan_pod_cgroups,
};
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::sources::runtime::RuntimeClient;
use user_systemd::UserSystemd;

const A: &str = "aaaaaaaa-1111-4000-8000-000000000001";
const B: &str = "bbbbbbbb-2222-4000-8000-000000000002";
const C: &str = "cccccccc-3333-4000-8000-000000000003";

/// kubelet's slice name for a pod (`ToSystemd` of `kubepods/<qos>/pod<uid>`).
fn slice(qos: &str, uid: &str) -> String {
    format!("kubepods-{qos}-pod{}.slice", uid.replace('-', "_"))
}

/// The slice's directory relative to the manager's cgroup.
fn slice_rel(qos: &str, uid: &str) -> String {
    format!("kubepods.slice/kubepods-{qos}.slice/{}", slice(qos, uid))
}

fn dirs(sd: &UserSystemd, rel: &str) -> Vec<PathBuf> {
    std::iter::once(&sd.unified)
        .chain(sd.named.iter())
        .map(|r| r.join(rel))
        .collect()
}

fn layout_of(sd: &UserSystemd) -> CgroupLayout {
    let (mut layout, detection) = decide_driver(
        &sd.unified,
        "/",
        DriverFlag::Auto,
        &RuntimeAnswer::Unimplemented,
    )
    .expect("decide");
    assert_eq!(
        detection.driver,
        Some(CgroupDriver::Systemd),
        "{detection:?}"
    );
    assert_eq!(detection.found_by, FoundBy::Layout);
    layout.kill_wait = Duration::from_secs(5);
    layout
}

fn pod(layout: &CgroupLayout, uid: &str) -> PodCgroup {
    let pods = scan_pod_cgroups(layout).expect("scan");
    pods.into_iter()
        .find(|p| p.uid == uid)
        .unwrap_or_else(|| panic!("pod {uid} not found"))
}

fn actuator(bus: &str) -> Arc<NodeActuator> {
    Arc::new(NodeActuator::new(
        RuntimeClient::new(
            Path::new("/nonexistent/containerd.sock"),
            Duration::from_secs(1),
        ),
        Arc::new(SystemdClient::new(bus)),
    ))
}

async fn destroy(
    a: &Arc<NodeActuator>,
    layout: &CgroupLayout,
    cg: PodCgroup,
) -> Result<podward_housekeeper::node::cgroup::DestroyReport, CgroupError> {
    let (a, layout) = (a.clone(), layout.clone());
    tokio::task::spawn_blocking(move || a.destroy_cgroup(&layout, &cg))
        .await
        .expect("join")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_stops_the_orphans_slice_and_nothing_else() {
    let mut sd = UserSystemd::start().await;
    let (slice_a, slice_b) = (slice("burstable", A), slice("burstable", B));
    let pa = sd.start_pod(&slice_a, "a1").await;
    let pb = sd.start_pod(&slice_b, "b1").await;
    let layout = layout_of(&sd);
    let orphan = pod(&layout, A);
    assert_eq!(orphan.paths, [sd.unified.join(slice_rel("burstable", A))]);

    let started = std::time::Instant::now();
    let report = destroy(&actuator(&sd.bus), &layout, orphan)
        .await
        .unwrap_or_else(|e| panic!("destroy: {e}\n{}", sd.log()));
    eprintln!(
        "systemd destroy (connect, kill, StopUnit + JobRemoved, ResetFailedUnit, cgroupfs \
         leftovers): {:?}",
        started.elapsed()
    );

    // Killed by us first (SIGKILL), not by systemd's stop (SIGTERM).
    assert!(report.killed.contains(&pa), "{report:?}");
    assert_eq!(sd.wait_signal(pa), Some(9));
    assert!(
        report.notes.iter().any(|n| n.contains(&format!(
            "systemd stopped {slice_a} (StopUnit job done, then ResetFailedUnit)"
        ))),
        "{report:?}"
    );
    for d in dirs(&sd, &slice_rel("burstable", A)) {
        assert!(!d.exists(), "{} still exists", d.display());
    }
    eventually(
        "systemd to unload the stopped slice",
        Duration::from_secs(10),
        async || !sd.knows(&slice_a).await,
    )
    .await;

    // The sibling pod, its process and the QoS parent are untouched.
    assert!(sd.alive(pb), "the sibling's process was killed");
    assert!(sd.knows(&slice_b).await, "the sibling's slice was stopped");
    assert!(sd.knows("kubepods-burstable.slice").await);
    for d in dirs(&sd, &slice_rel("burstable", B)) {
        assert!(d.exists(), "{} was removed", d.display());
    }
    assert_eq!(pod(&layout, B).uid, B);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_systemd_does_not_know_goes_through_cgroupfs_and_the_evidence_says_so() {
    let mut sd = UserSystemd::start().await;
    let pb = sd.start_pod(&slice("besteffort", B), "b1").await;
    // A pod cgroup made behind systemd's back: same name, but never a unit.
    let rel_c = format!("{}/cri-containerd-c1.scope", slice_rel("besteffort", C));
    let pc = sd.sleeper_in(&rel_c);
    let slice_c = slice("besteffort", C);
    assert!(!sd.knows(&slice_c).await);
    let layout = layout_of(&sd);

    let report = destroy(&actuator(&sd.bus), &layout, pod(&layout, C))
        .await
        .unwrap_or_else(|e| panic!("destroy: {e}\n{}", sd.log()));
    assert_eq!(sd.wait_signal(pc), Some(9));
    assert!(
        report.notes.iter().any(|n| n.contains(&format!(
            "systemd does not know {slice_c} (NoSuchUnit): removed through cgroupfs instead"
        ))),
        "{report:?}"
    );
    // The layout is the manager's v2 cgroup (where the hand-made cgroup is).
    assert_eq!(
        report.removed,
        [
            sd.unified.join(&rel_c),
            sd.unified.join(slice_rel("besteffort", C))
        ],
        "the scope, then the slice: {report:?}"
    );
    assert!(sd.alive(pb));
    assert!(sd.knows(&slice("besteffort", B)).await);
    for d in dirs(&sd, &slice_rel("besteffort", B)) {
        assert!(d.exists(), "{} was removed", d.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_bus_nothing_is_killed_or_removed() {
    let mut sd = UserSystemd::start().await;
    let slice_a = slice("burstable", A);
    let pa = sd.start_pod(&slice_a, "a1").await;
    let layout = layout_of(&sd);
    let nowhere = tempfile::tempdir().expect("tempdir");
    let bus = format!("unix:path={}", nowhere.path().join("no-bus").display());

    let err = destroy(&actuator(&bus), &layout, pod(&layout, A))
        .await
        .expect_err("no bus, no destroy");
    assert!(
        matches!(err, CgroupError::Systemd(SystemdError::Connect { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains(&bus), "{err}");
    assert!(
        sd.alive(pa),
        "a process was killed although the slice could not be stopped"
    );
    assert!(sd.knows(&slice_a).await);
    for d in dirs(&sd, &slice_rel("burstable", A)) {
        assert!(
            d.exists(),
            "{} was removed behind systemd's back",
            d.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reduce_cpu_sets_the_slice_weight_through_systemd_and_kills_nothing() {
    let mut sd = UserSystemd::start().await;
    let slice_a = slice("burstable", A);
    let pa = sd.start_pod(&slice_a, "a1").await;
    let iface = "org.freedesktop.systemd1.Slice";
    assert_ne!(sd.u64_property(&slice_a, iface, "CPUWeight").await, 1);
    let layout = layout_of(&sd);
    let (a, l, cg) = (actuator(&sd.bus), layout.clone(), pod(&layout, A));
    tokio::task::spawn_blocking(move || a.reduce_cpu(&l, &cg))
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("reduce: {e}\n{}", sd.log()));
    // kubelet's ReduceCPULimits on v2: MinShares 2 is cpu.weight 1, set on the unit.
    assert_eq!(sd.u64_property(&slice_a, iface, "CPUWeight").await, 1);
    assert!(sd.alive(pa));
    assert!(sd.knows(&slice_a).await);
    for d in dirs(&sd, &slice_rel("burstable", A)) {
        assert!(d.exists(), "{} was removed", d.display());
    }
}

/// A whole pass through the daemon's own wiring (`node_reconciler`): containerd (a fake CRI
/// server) reports the systemd driver and a READY sandbox of B; A has no sandbox. The plan's
/// header names the driver and how it was found; A's slice is stopped through systemd and the
/// action's evidence says so; B is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_on_a_systemd_node_acts_through_dbus_and_says_so() {
    let mut sd = UserSystemd::start().await;
    let (slice_a, slice_b) = (slice("burstable", A), slice("burstable", B));
    let pa = sd.start_pod(&slice_a, "a1").await;
    let pb = sd.start_pod(&slice_b, "b1").await;

    let tmp = tempfile::tempdir().expect("tempdir");
    let sock = tmp.path().join("cri.sock");
    let _cri = fake_cri::serve(
        fake_cri::FakeCri {
            sandboxes: vec![PodSandbox {
                id: "sb-b".into(),
                metadata: Some(PodSandboxMetadata {
                    name: "b".into(),
                    uid: B.into(),
                    namespace: "default".into(),
                    attempt: 0,
                }),
                state: 0,
                ..Default::default()
            }],
            cgroup_driver: Some(CriCgroupDriver::Systemd as i32),
            ..Default::default()
        },
        &sock,
    );
    std::fs::create_dir_all(tmp.path().join("kubelet/pods")).expect("mkdir");
    std::fs::create_dir_all(tmp.path().join("logs")).expect("mkdir");
    let cfg = Config {
        socket: tmp.path().join("hk.sock"),
        shim_socket: tmp.path().join("shim.sock"),
        prober_socket: tmp.path().join("prober.sock"),
        common: podward_api::daemon::config::Common {
            containerd_socket: sock,
            ..Config::default().common
        },
        cgroup_root: sd.unified.clone(),
        cgroup_driver: DriverName::Auto,
        systemd_bus: sd.bus.clone(),
        kubelet_root: tmp.path().join("kubelet"),
        log_root: tmp.path().join("logs"),
        mountinfo: "/proc/self/mountinfo".into(),
        orphan_grace: Duration::ZERO,
        ..Config::default()
    };
    let rec = podward_housekeeper::run::node_reconciler(&cfg);
    let mut acted = None;
    eventually(
        "a pass that acts on A",
        Duration::from_secs(30),
        async || {
            let (p, _) = rec.pass(Mode::Act).await;
            assert!(p.sources_ok, "{:?}", p.sources);
            let done = p.actions.iter().any(|a| a.pod_uid == A);
            if done {
                acted = Some(p);
            }
            done
        },
    )
    .await;
    let plan = acted.expect("plan");
    let driver = plan.cgroup_driver.clone().expect("driver in the plan");
    assert_eq!(
        (
            driver.driver.as_str(),
            driver.found_by.as_str(),
            driver.cgroup_version.as_str()
        ),
        ("systemd", "runtime-config", "v2")
    );
    let table = podward_housekeeper::report::render_table(&plan);
    assert!(
        table.contains("cgroup driver: systemd (from containerd's CRI RuntimeConfig), cgroup v2"),
        "{table}"
    );
    let action = plan
        .actions
        .iter()
        .find(|a| a.kind() == ActionKind::RemoveCgroup)
        .expect("REMOVE_CGROUP");
    assert_eq!(action.outcome(), Outcome::Done, "{action:?}");
    assert!(
        action
            .evidence
            .iter()
            .any(|e| e.contains(&format!("systemd stopped {slice_a}"))),
        "{:?}",
        action.evidence
    );
    assert!(
        plan.actions.iter().all(|a| a.pod_uid == A),
        "{:?}",
        plan.actions
    );
    assert_eq!(sd.wait_signal(pa), Some(9));
    for d in dirs(&sd, &slice_rel("burstable", A)) {
        assert!(!d.exists(), "{} still exists", d.display());
    }
    assert!(sd.alive(pb));
    assert!(sd.knows(&slice_b).await);
}
