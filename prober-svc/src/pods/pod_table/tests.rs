use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::probing::pod_view::PodView;
use crate::probing::worker::handle::StatusPublisher;
use crate::spec::Handler;

fn pod(uid: &str) -> PodInfo {
    PodInfo {
        uid: uid.into(),
        name: format!("pod-{uid}"),
        namespace: "default".into(),
        sandbox_id: format!("sb-{uid}"),
        sandbox_created_at_ns: 1,
        ip: None,
        probes_annotation: None,
        stop_requested_at_ns: 0,
        containers: BTreeMap::new(),
        api: None,
    }
}

fn entry(pod: PodInfo) -> Box<PodEntry> {
    Box::new(PodEntry {
        shared: Arc::new(PodView::new(pod)),
        spec_errors: Vec::new(),
        invalid: 0,
        startup: BTreeMap::new(),
        annotation: String::new(),
        probes: BTreeMap::new(),
        unknown: UnknownNames::default(),
        ended: BTreeSet::new(),
    })
}

fn spec(period_s: u64) -> ProbeSpec {
    ProbeSpec {
        handler: Handler::Exec {
            command: vec!["true".into()],
        },
        initial_delay_seconds: 0,
        timeout: Duration::from_secs(1),
        period: Duration::from_secs(period_s),
        success_threshold: 1,
        failure_threshold: 3,
        termination_grace_period_seconds: None,
    }
}

fn key(uid: &str, container: &str, ty: ProbeType) -> WorkerKey {
    WorkerKey {
        pod_uid: uid.into(),
        container: container.into(),
        ty,
    }
}

fn worker_entry(spec: ProbeSpec, startup: StartupGating) -> WorkerEntry {
    WorkerEntry {
        ctl: Arc::new(WorkerCtl::default()),
        status: StatusPublisher::default().reader(),
        spec: Arc::new(spec),
        startup,
    }
}

/// Starts the workers of `specs` on a pod that has none.
fn add_workers(t: &PodTable, uid: &str, specs: Vec<(WorkerKey, ProbeSpec, StartupGating)>) {
    let wanted: Wanted = specs
        .into_iter()
        .map(|(k, spec, startup)| (k, (Arc::new(spec), startup)))
        .collect();
    let unwanted = t.reconcile_workers(uid, wanted, |_, spec, startup| worker_entry(spec, startup));
    assert!(unwanted.is_empty(), "the pod had no workers");
}

#[test]
fn a_pod_is_probed_or_idle_never_both() {
    let t = PodTable::default();
    let idle = t.upsert(pod("u"), |_, _| (), NewPod::Idle);
    assert!(matches!(idle, Upsert::Idle));
    assert!(t.pod_uids().is_empty());
    assert_eq!(t.pod("u").map(|p| p.uid), Some("u".to_owned()));
    let added = t.upsert(pod("u"), |_, _| (), |p| NewPod::Probed(entry(p)));
    assert!(matches!(added, Upsert::Added));
    assert_eq!(t.pod_uids(), vec!["u".to_owned()]);
    // Once probed, it is no longer idle: it is gone from a snapshot without it exactly once.
    assert_eq!(t.uids_not_in(&HashSet::new()), vec!["u".to_owned()]);
    let known = t.upsert(pod("u"), |e, p| e.shared.read().uid == p.uid, NewPod::Idle);
    assert!(matches!(known, Upsert::Known(true)));
    // A probed pod is not made idle behind the manager's back.
    t.set_idle(pod("u"));
    assert_eq!(t.uids_not_in(&HashSet::new()), vec!["u".to_owned()]);
}

#[test]
fn removing_a_pod_takes_its_workers_and_only_its_own() {
    let t = PodTable::default();
    for uid in ["a", "b"] {
        t.upsert(pod(uid), |_, _| (), |p| NewPod::Probed(entry(p)));
        add_workers(
            &t,
            uid,
            vec![
                (
                    key(uid, "app", ProbeType::Liveness),
                    spec(10),
                    StartupGating::Ungated,
                ),
                (
                    key(uid, "app", ProbeType::Readiness),
                    spec(10),
                    StartupGating::Ungated,
                ),
            ],
        );
    }
    assert_eq!(t.worker_count(), 4);
    let (_, workers) = t.remove("a").expect("a was probed");
    let mut keys: Vec<WorkerKey> = workers.into_iter().map(|(k, _)| k).collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            key("a", "app", ProbeType::Liveness),
            key("a", "app", ProbeType::Readiness)
        ]
    );
    assert_eq!(t.worker_count(), 2);
    assert_eq!(t.pod_uids(), vec!["b".to_owned()]);
    assert!(t.remove("a").is_none(), "removal is idempotent");
}

#[test]
fn reconciling_stops_the_unwanted_updates_the_changed_and_starts_the_missing() {
    let t = PodTable::default();
    t.upsert(pod("u"), |_, _| (), |p| NewPod::Probed(entry(p)));
    add_workers(
        &t,
        "u",
        vec![
            (
                key("u", "app", ProbeType::Liveness),
                spec(10),
                StartupGating::Ungated,
            ),
            (
                key("u", "app", ProbeType::Readiness),
                spec(10),
                StartupGating::Ungated,
            ),
        ],
    );
    let readiness = t.workers_of("u").get("app", ProbeType::Readiness).cloned();
    let readiness = readiness.expect("readiness runs");
    let wanted: Wanted = [
        (
            key("u", "app", ProbeType::Readiness),
            (Arc::new(spec(10)), StartupGating::Gated),
        ),
        (
            key("u", "app", ProbeType::Startup),
            (Arc::new(spec(5)), StartupGating::Gated),
        ),
    ]
    .into_iter()
    .collect();
    let mut started = Vec::new();
    let unwanted = t.reconcile_workers("u", wanted, |k, spec, startup| {
        started.push(k);
        worker_entry(spec, startup)
    });
    let unwanted: Vec<WorkerKey> = unwanted.into_iter().map(|(k, _)| k).collect();
    assert_eq!(unwanted, vec![key("u", "app", ProbeType::Liveness)]);
    assert_eq!(started, vec![key("u", "app", ProbeType::Startup)]);
    // The changed worker kept its handle and was told of its new gating.
    let now = t.workers_of("u");
    let r = now
        .get("app", ProbeType::Readiness)
        .expect("readiness runs");
    assert!(Arc::ptr_eq(&r.ctl, &readiness.ctl));
    assert_eq!(r.startup, StartupGating::Gated);
    let update = readiness.ctl.take_update().expect("an update");
    assert_eq!(update.startup, StartupGating::Gated);
    assert_eq!(t.worker_count(), 2);
}

#[test]
fn an_exited_worker_is_removed_only_if_its_key_is_still_its_own() {
    let t = PodTable::default();
    t.upsert(pod("u"), |_, _| (), |p| NewPod::Probed(entry(p)));
    let k = key("u", "app", ProbeType::Liveness);
    add_workers(&t, "u", vec![(k.clone(), spec(10), StartupGating::Ungated)]);
    let older = Arc::new(WorkerCtl::default());
    assert!(!t.remove_worker(&k, &older), "another worker holds the key");
    assert_eq!(t.worker_count(), 1);
    let own = t
        .workers_of("u")
        .get("app", ProbeType::Liveness)
        .map(|w| w.ctl.clone());
    assert!(t.remove_worker(&k, &own.expect("runs")));
    assert_eq!(t.worker_count(), 0);
}

#[test]
fn a_worker_that_ended_on_its_own_is_marked_in_its_pods_entry_and_a_stopped_one_is_not() {
    let t = PodTable::default();
    t.upsert(pod("u"), |_, _| (), |p| NewPod::Probed(entry(p)));
    let live = key("u", "app", ProbeType::Liveness);
    let ready = key("u", "app", ProbeType::Readiness);
    add_workers(
        &t,
        "u",
        vec![
            (live.clone(), spec(10), StartupGating::Ungated),
            (ready.clone(), spec(10), StartupGating::Ungated),
        ],
    );
    let ctl = |k: &WorkerKey| {
        t.workers_of("u")
            .get(&k.container, k.ty)
            .map(|w| w.ctl.clone())
            .expect("runs")
    };
    let (live_ctl, ready_ctl) = (ctl(&live), ctl(&ready));
    // Readiness is stopped by the table's owner (not wanted any more): then it exits.
    let wanted: Wanted = [(live.clone(), (Arc::new(spec(10)), StartupGating::Ungated))]
        .into_iter()
        .collect();
    let unwanted = t.reconcile_workers("u", wanted, |_, spec, startup| worker_entry(spec, startup));
    assert_eq!(unwanted.len(), 1);
    assert!(!t.remove_worker(&ready, &ready_ctl), "already taken out");
    assert!(t.remove_worker(&live, &live_ctl), "ended on its own");
    let ended = t.entry("u", |e| e.ended.clone()).expect("probed");
    assert_eq!(ended, BTreeSet::from([live]));
}

#[test]
fn the_api_view_is_set_and_cleared_in_the_table_and_in_the_probed_pod() {
    let t = PodTable::default();
    t.upsert(pod("u"), |_, _| (), |p| NewPod::Probed(entry(p)));
    let api = Arc::new(api_view("u"));
    assert!(t.set_api(api.clone()), "the first view");
    assert!(!t.set_api(api), "not the first any more");
    assert_eq!(t.api_pod_uids(), vec!["u".to_owned()]);
    t.entry("u", |e| {
        let mut p = PodInfo::clone(&e.shared.read());
        p.api = Some(Arc::new(api_view("u")));
        *e.shared.write() = Arc::new(p);
    });
    assert!(t.clear_api("u"));
    assert_eq!(t.api_pod_count(), 0);
    assert!(t.pod("u").expect("probed").api.is_none());
    assert!(!t.clear_api("u"));
}

/// The API's view of a pod with UID `uid`, through the reflector's own conversion.
fn api_view(uid: &str) -> ApiPod {
    let mut pod = k8s_openapi::api::core::v1::Pod::default();
    pod.metadata.uid = Some(uid.into());
    crate::kubernetes::convert::api_pod(&pod, crate::kubernetes::names::DEFAULT_GATE_CONDITION)
        .expect("a pod with a UID")
}

#[test]
fn while_probed_runs_only_for_a_probed_pod() {
    let t = PodTable::default();
    let mut ran = 0;
    t.while_probed("u", || ran += 1);
    t.upsert(pod("u"), |_, _| (), |p| NewPod::Probed(entry(p)));
    t.while_probed("u", || ran += 1);
    t.remove("u");
    t.while_probed("u", || ran += 1);
    assert_eq!(ran, 1);
}
