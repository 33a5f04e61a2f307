//! `podward_prober_kills_total` series follow the pods: they go when their pod goes (as kubelet's
//! worker deletes its probe series when it stops), survive while a re-created pod of the same
//! name still counts in them, and a probe still in flight when its pod goes kills nothing.

use prometheus::core::Collector;

use super::harness::*;
use crate::model::PodInfo;
use crate::spec::ProbeType;

/// Liveness fails at the first failure, probed every second.
const FAILING_LIVENESS: &str =
    r#"{"c":{"livenessProbe":{"exec":{"command":["x"]},"periodSeconds":1,"failureThreshold":1}}}"#;

/// The `podward_prober_kills_total` series as (pod, value).
fn kill_series(n: &Node) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = n
        .metrics
        .kills
        .collect()
        .iter()
        .flat_map(|f| f.get_metric())
        .map(|m| {
            let pod = m
                .get_label()
                .iter()
                .find(|l| l.name() == "pod")
                .map(|l| l.value().to_owned())
                .unwrap_or_default();
            (pod, m.get_counter().get_value())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Pod `uid` named `name` whose container `c` (instance `id`) fails its liveness probe.
fn failing(n: &Node, uid: &str, name: &str, id: &str) -> PodInfo {
    let mut p = pod(
        uid,
        FAILING_LIVENESS,
        vec![running(&n.clock, id, "c", 0, S)],
    );
    p.name = name.to_owned();
    p
}

#[tokio::test(start_paused = true)]
async fn a_pods_kill_series_goes_with_the_pod() {
    let n = Node::steady().await;
    n.script.set("c", ProbeType::Liveness, failure(), MS);
    n.manager.update_pod(failing(&n, "u", "web", "c1"));
    n.manager.update_pod(failing(&n, "v", "db", "d1"));
    run_for(2 * S).await;
    assert_eq!(n.kills.done.lock().len(), 2, "both containers killed");
    assert_eq!(
        kill_series(&n),
        [("db".to_owned(), 1.0), ("web".to_owned(), 1.0)]
    );
    assert!(n.manager.remove_pod("u"));
    assert_eq!(
        kill_series(&n),
        [("db".to_owned(), 1.0)],
        "web's series went"
    );
    assert_eq!(n.manager.cleanup(&["v".into()]), ["v".to_owned()]);
    assert!(kill_series(&n).is_empty(), "CleanupPods removes it too");
}

#[tokio::test(start_paused = true)]
async fn a_series_shared_by_a_recreated_pod_goes_with_the_last_of_them() {
    let n = Node::steady().await;
    n.script.set("c", ProbeType::Liveness, failure(), MS);
    // A StatefulSet's pod re-created under its name, while the old UID is still followed.
    n.manager.update_pod(failing(&n, "old", "web-0", "o1"));
    n.manager.update_pod(failing(&n, "new", "web-0", "n1"));
    run_for(2 * S).await;
    assert_eq!(kill_series(&n), [("web-0".to_owned(), 2.0)]);
    n.manager.remove_pod("old");
    assert_eq!(
        kill_series(&n),
        [("web-0".to_owned(), 2.0)],
        "the new pod still counts in it"
    );
    n.manager.remove_pod("new");
    assert!(kill_series(&n).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_probe_in_flight_when_its_pod_goes_kills_nothing() {
    let n = Node::steady().await;
    // The first probe starts at once and fails 3 s later, after the pod is gone.
    n.script.set("c", ProbeType::Liveness, failure(), 3 * S);
    n.manager.update_pod(failing(&n, "u", "web", "c1"));
    run_for(S).await;
    assert_eq!(n.script.calls_of(ProbeType::Liveness).len(), 1, "in flight");
    n.manager.remove_pod("u");
    run_for(5 * S).await;
    assert!(n.kills.done.lock().is_empty(), "{:?}", n.kills.done.lock());
    assert!(kill_series(&n).is_empty(), "{:?}", kill_series(&n));
}
