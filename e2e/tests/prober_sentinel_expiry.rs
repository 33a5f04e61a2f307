//! The sentinel at the HTTP boundary, against the e2e API stand-in shared with real node
//! lease renewers (`support/prober_sentinel.rs`), at short durations:
//!
//! - a prober killed (its renewer task dropped, as by SIGKILL: no goodbye): its node's gated
//!   pods go `False` (reason `ProberNotReporting`, the node and the last renewal named) within
//!   lease duration + one sentinel period, one event per pod; pods without the gate, pods
//!   already `False`, and a node that never had a lease are not touched; never `True`;
//! - the prober back: its renewals stop the sentinel, whose writes do not come back (the
//!   prober's own results take over);
//! - every expired node of a healthy zone is marked at once (a node whose marking fails is
//!   retried alone); a partially or fully disrupted zone, or every lease expired at once, is
//!   held (the metric says so, and one Warning event on each held node's Node);
//! - a lease whose Node is gone is ignored; a deleted Node takes its lease with it.

#[path = "support/prober_sentinel.rs"]
mod support;

use std::time::{Duration, SystemTime};

use podward_prober::kubernetes::gate::KubeWriter;
use podward_prober::kubernetes::sentinel::Rates;
use support::*;
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[tokio::test]
async fn a_killed_prober_s_gated_pods_go_false_within_lease_duration_and_a_period() {
    let cluster = Cluster::new().await;
    for n in ["node-a", "node-c", "node-d"] {
        cluster.add_pod(&format!("{n}-filler"), n, false, None);
    }
    cluster.add_pod("web-1", "node-a", true, Some("True"));
    cluster.add_pod("web-2", "node-a", true, Some("True"));
    cluster.add_pod("plain", "node-a", false, None);
    cluster.add_pod("down", "node-a", true, Some("False"));
    cluster.add_pod("fresh", "node-a", true, None);
    // node-b never had a lease: podward is not installed there.
    cluster.add_pod("other", "node-b", true, Some("True"));
    let a = prober(&cluster, "node-a");
    let _c = prober(&cluster, "node-c");
    let _d = prober(&cluster, "node-d");
    let (_s, metrics) = start_sentinel(&cluster, "sentinel-0", fast());
    assert!(
        eventually(Duration::from_secs(10), || metrics.leader.get() == 1
            && metrics.leases.get() == 3)
        .await,
        "the sentinel leads and sees the three leases"
    );
    // Healthy for a while: nothing written.
    tokio::time::sleep(LEASE + PERIOD * 2).await;
    assert!(
        cluster.status_writes().is_empty(),
        "{:?}",
        cluster.status_writes()
    );

    let last_renewal = cluster.lease("node-a").expect("lease")["spec"]["renewTime"]
        .as_str()
        .expect("renewTime")
        .to_owned();
    a.abort();
    let killed = SystemTime::now();
    let marked = eventually(LEASE + PERIOD + Duration::from_secs(2), || {
        cluster.status_writes().len() >= 2
    })
    .await;
    assert!(
        marked,
        "marked within lease duration + a period: {:?}",
        cluster.status_writes()
    );
    let writes = cluster.status_writes();
    // Lease duration is counted from the sentinel's last sight of a renewal, at most one
    // renewal interval before the kill.
    let first = writes.iter().map(|w| w.at).min().expect("writes");
    assert!(
        first >= killed + LEASE - RENEW,
        "not before the lease expired"
    );
    assert!(
        first <= killed + LEASE + PERIOD + Duration::from_millis(800),
        "{:?}",
        first.duration_since(killed)
    );
    let mut pods: Vec<&str> = writes.iter().map(|w| w.pod.as_str()).collect();
    pods.sort_unstable();
    assert_eq!(
        pods,
        ["web-1", "web-2"],
        "only the gated pods that said True"
    );
    for w in &writes {
        assert_eq!(w.condition["status"], "False");
        assert_eq!(w.condition["reason"], "ProberNotReporting");
        let msg = w.condition["message"].as_str().expect("message");
        assert!(
            msg.contains("node-a") && msg.contains(&last_renewal[..19]),
            "{msg}"
        );
        assert_eq!(
            w.field_manager, "podward-prober",
            "the gate's own field manager"
        );
        assert_eq!(w.code, 200);
    }
    for p in ["web-1", "web-2"] {
        assert_eq!(cluster.condition(p).expect("condition")["status"], "False");
    }
    assert_eq!(
        cluster.condition("down").expect("condition")["reason"],
        serde_json::Value::Null
    );
    assert!(cluster.condition("fresh").is_none());
    assert_eq!(
        cluster.condition("other").expect("condition")["status"],
        "True"
    );
    assert!(
        !cluster.node_lists().iter().any(|n| n == "node-b"),
        "node-b never listed"
    );
    // One event per pod marked (core v1, through the prober's correlator), and one on the Node.
    assert!(eventually(Duration::from_secs(2), || cluster.events().len() == 3).await);
    let mut regarding: Vec<String> = cluster
        .events()
        .iter()
        .map(|e| {
            assert_eq!(e["reason"], "ProberNotReporting");
            assert_eq!(e["type"], "Warning");
            assert_eq!(e["source"]["component"], "podward-sentinel");
            format!(
                "{}/{}",
                e["involvedObject"]["kind"].as_str().unwrap_or(""),
                e["involvedObject"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    regarding.sort();
    assert_eq!(regarding, ["Node/node-a", "Pod/web-1", "Pod/web-2"]);
    let node_event = cluster
        .events()
        .into_iter()
        .find(|e| e["involvedObject"]["kind"] == "Node")
        .expect("the Node's event");
    assert_eq!(node_event["metadata"]["namespace"], "default");
    assert!(
        node_event["message"]
            .as_str()
            .is_some_and(|m| m.contains("2 gated pod(s) marked not ready")),
        "{node_event}"
    );
    assert!(
        node_event["involvedObject"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "the Node's uid, from the lease's owner: {node_event}"
    );
    // Later periods write nothing more.
    tokio::time::sleep(PERIOD * 5).await;
    assert_eq!(cluster.status_writes().len(), 2);
    assert_eq!(metrics.pods_marked.get(), 2);
    assert_eq!(metrics.expired.get(), 1);
    assert!(
        cluster
            .status_writes()
            .iter()
            .all(|w| w.condition["status"] != "True"),
        "never True"
    );
}

#[tokio::test]
async fn the_prober_back_takes_over_and_the_sentinel_does_not_write_again() {
    let cluster = Cluster::new().await;
    cluster.add_pod("web-1", "node-a", true, Some("True"));
    for n in ["node-c", "node-d"] {
        cluster.add_pod(&format!("{n}-filler"), n, false, None);
    }
    let a = prober(&cluster, "node-a");
    let _c = prober(&cluster, "node-c");
    let _d = prober(&cluster, "node-d");
    let (_s, metrics) = start_sentinel(&cluster, "sentinel-0", fast());
    assert!(eventually(Duration::from_secs(10), || metrics.leases.get() == 3).await);
    a.abort();
    assert!(
        eventually(LEASE * 3, || cluster.status_writes().len() == 1).await,
        "marked"
    );
    // The prober comes back: it renews, then its gate writes its fresh result.
    let _a = prober(&cluster, "node-a");
    assert!(eventually(Duration::from_secs(3), || metrics.expired.get() == 0).await);
    assert!(
        eventually(Duration::from_secs(3), || cluster.events().iter().any(
            |e| {
                e["involvedObject"]["kind"] == "Node"
                    && e["involvedObject"]["name"] == "node-a"
                    && e["reason"] == "ProberReporting"
                    && e["type"] == "Normal"
            }
        ))
        .await,
        "one event on the Node when it recovers: {:?}",
        cluster.events()
    );
    let writer = KubeWriter::new(cluster.client_named("prober-node-a"));
    use podward_prober::kubernetes::gate::{ConditionWriter, Target};
    use podward_prober::model::api_pod::{ConditionStatus, GateCondition};
    writer
        .write(
            "podward.io/ready",
            &Target {
                namespace: "shop".into(),
                name: "web-1".into(),
                uid: "uid-web-1".into(),
            },
            &GateCondition {
                status: ConditionStatus::True,
                reason: String::new(),
                message: String::new(),
                last_transition_time: "2027-01-01T00:00:00Z".into(),
            },
        )
        .await
        .expect("the prober's write");
    // No flap: the sentinel leaves the condition to the prober.
    tokio::time::sleep(LEASE + PERIOD * 3).await;
    let sentinel_writes: Vec<_> = cluster
        .status_writes()
        .into_iter()
        .filter(|w| w.who == "sentinel-0")
        .collect();
    assert_eq!(sentinel_writes.len(), 1, "{sentinel_writes:?}");
    assert_eq!(
        cluster.condition("web-1").expect("condition")["status"],
        "True"
    );
}

/// `n` nodes with a lease and a gated pod each; their probers.
fn nodes(cluster: &Cluster, n: usize) -> Vec<JoinHandle<()>> {
    (0..n)
        .map(|i| {
            let node = format!("node-{i:02}");
            cluster.add_pod(&format!("web-{i:02}"), &node, true, Some("True"));
            prober(cluster, &node)
        })
        .collect()
}

#[tokio::test]
async fn a_partially_disrupted_zone_is_held_and_says_so() {
    let cluster = Cluster::new().await;
    let probers = nodes(&cluster, 12);
    let (_s, metrics) = start_sentinel(&cluster, "sentinel-0", Rates::default());
    assert!(eventually(Duration::from_secs(10), || metrics.leases.get() == 12).await);
    // 8 of 12 go at once: 67 % ≥ 55 %, a partially disrupted zone: podward's own fault is
    // likelier than eight probers' at once.
    for p in &probers[..8] {
        p.abort();
    }
    assert!(eventually(LEASE * 3, || metrics.held.get() == 8).await);
    let held_events = || {
        let mut on: Vec<(String, serde_json::Value)> = cluster
            .events()
            .iter()
            .filter(|e| e["involvedObject"]["kind"] == "Node" && e["reason"] == "ProberMarkingHeld")
            .map(|e| {
                assert_eq!(e["type"], "Warning", "{e}");
                let node = e["involvedObject"]["name"].as_str().unwrap_or_default();
                (node.to_owned(), e["count"].clone())
            })
            .collect();
        on.sort_by(|a, b| a.0.cmp(&b.0));
        on
    };
    let expected: Vec<String> = (0..8).map(|i| format!("node-{i:02}")).collect();
    assert!(
        eventually(Duration::from_secs(3), || held_events().len() == 8).await,
        "one event on each held node's Node: {:?}",
        cluster.events()
    );
    tokio::time::sleep(PERIOD * 5).await;
    assert!(
        cluster.status_writes().is_empty(),
        "{:?}",
        cluster.status_writes()
    );
    assert_eq!(metrics.waiting.get(), 8);
    // Said once per node while the hold lasts, not at every period.
    let events = held_events();
    assert_eq!(
        events.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        expected
    );
    assert!(events.iter().all(|(_, count)| count == 1), "{events:?}");
}

#[tokio::test]
async fn ten_lost_probers_in_a_healthy_zone_are_all_marked_at_once_and_a_failing_node_holds_none_back()
 {
    let cluster = Cluster::new().await;
    let probers = nodes(&cluster, 30);
    // One node's pod refuses every write (a webhook): that node is retried, alone.
    cluster.refuse_status_writes("web-00", 500, "etcdserver: request is too large");
    let (_s, metrics) = start_sentinel(&cluster, "sentinel-0", Rates::default());
    assert!(eventually(Duration::from_secs(10), || metrics.leases.get() == 30).await);
    for p in &probers[..10] {
        p.abort();
    }
    let killed = Instant::now();
    let marked = |cluster: &Cluster| {
        cluster
            .status_writes()
            .iter()
            .filter(|w| w.code == 200)
            .count()
    };
    assert!(
        eventually(LEASE + PERIOD + Duration::from_secs(3), || marked(&cluster)
            == 9)
        .await,
        "{:?}",
        cluster.status_writes()
    );
    let took = killed.elapsed();
    assert!(
        took <= LEASE + PERIOD * 2 + Duration::from_secs(1),
        "all nine marked {took:?} after the kill (lease {LEASE:?} + period {PERIOD:?})"
    );
    // The refused node is tried again, after a backoff of its own.
    assert!(
        eventually(Duration::from_secs(5), || cluster
            .status_writes()
            .iter()
            .filter(|w| w.pod == "web-00")
            .count()
            >= 2)
        .await
    );
    assert_eq!(marked(&cluster), 9);
}

#[tokio::test]
async fn every_node_expiring_at_once_marks_nothing() {
    let cluster = Cluster::new().await;
    let probers = nodes(&cluster, 6);
    let rates = Rates {
        normal: 10.0,
        secondary: 10.0,
        unhealthy_zone_threshold: 0.55,
        large_cluster_threshold: 0,
    };
    let (_s, metrics) = start_sentinel(&cluster, "sentinel-0", rates);
    assert!(eventually(Duration::from_secs(10), || metrics.leases.get() == 6).await);
    // Every lease stops together: the sentinel's side (its network, the API) is the likely
    // fault, as the node lifecycle controller assumes when every zone is fully disrupted.
    for p in &probers {
        p.abort();
    }
    assert!(eventually(LEASE * 3, || metrics.expired.get() == 6).await);
    tokio::time::sleep(PERIOD * 10).await;
    assert!(
        cluster.status_writes().is_empty(),
        "{:?}",
        cluster.status_writes()
    );
    assert_eq!(metrics.waiting.get(), 6);
    // One node back: the others get a fresh lease duration (as the node lifecycle controller
    // resets its timestamps when it leaves this mode), then, still silent, are a partially
    // disrupted zone: held.
    let _back = prober(&cluster, "node-00");
    assert!(eventually(Duration::from_secs(2), || metrics.expired.get() == 0).await);
    tokio::time::sleep(LEASE - Duration::from_millis(500)).await;
    assert!(cluster.status_writes().is_empty(), "a fresh duration first");
    assert!(eventually(Duration::from_secs(5), || metrics.held.get() == 5).await);
    tokio::time::sleep(PERIOD * 3).await;
    assert!(
        cluster.status_writes().is_empty(),
        "{:?}",
        cluster.status_writes()
    );
}

#[tokio::test]
async fn a_cluster_of_one_or_two_nodes_is_marked_when_its_probers_are_all_gone() {
    // One or two expired leases are no partition: every lease of a one-node cluster expires
    // with its one prober, and that node's pods must not keep `True` without bound.
    for n in [1, 2] {
        let cluster = Cluster::new().await;
        let probers = nodes(&cluster, n);
        let (s, metrics) = start_sentinel(&cluster, "sentinel-0", Rates::default());
        assert!(
            eventually(Duration::from_secs(10), || metrics.leader.get() == 1
                && metrics.leases.get() == i64::try_from(n).expect("n"))
            .await
        );
        for p in &probers {
            p.abort();
        }
        let killed = Instant::now();
        // Both at once: one or two expired nodes are no disruption.
        let within = LEASE + PERIOD + Duration::from_secs(2);
        assert!(
            eventually(within, || cluster.status_writes().len() == n).await,
            "{n} node(s): {:?} after {:?}",
            cluster.status_writes(),
            killed.elapsed()
        );
        assert!(
            cluster
                .status_writes()
                .iter()
                .all(|w| w.condition["reason"] == "ProberNotReporting")
        );
        s.abort();
    }
}

#[tokio::test]
async fn a_zone_that_drops_whole_is_held_while_a_lost_prober_of_a_healthy_zone_is_marked() {
    let cluster = Cluster::new().await;
    let mut probers = Vec::new();
    for (i, zone) in ["zone-a"; 4].into_iter().chain(["zone-b"; 3]).enumerate() {
        let node = format!("node-{i:02}");
        cluster.add_node(&node, zone);
        cluster.add_pod(&format!("web-{i:02}"), &node, true, Some("True"));
        probers.push(prober(&cluster, &node));
    }
    let (_s, metrics) = start_sentinel(&cluster, "sentinel-0", Rates::default());
    assert!(
        eventually(Duration::from_secs(10), || metrics.leader.get() == 1
            && metrics.leases.get() == 7)
        .await
    );
    assert!(
        eventually(Duration::from_secs(5), || (0..7).all(|i| {
            cluster.lease(&format!("node-{i:02}")).is_some_and(|l| {
                l["metadata"]["labels"]["topology.kubernetes.io/zone"]
                    == if i < 4 { "zone-a" } else { "zone-b" }
            })
        }))
        .await,
        "every lease carries its node's zone"
    );
    // zone-a drops whole (a zone outage, or a rollout gone wrong there), and one of zone-b.
    for p in &probers[..5] {
        p.abort();
    }
    assert!(
        eventually(LEASE + PERIOD + Duration::from_secs(3), || {
            cluster.status_writes().len() == 1
        })
        .await,
        "{:?}",
        cluster.status_writes()
    );
    assert_eq!(cluster.status_writes()[0].pod, "web-04");
    assert!(eventually(Duration::from_secs(2), || metrics.held.get() == 4).await);
    tokio::time::sleep(PERIOD * 3).await;
    assert_eq!(cluster.status_writes().len(), 1, "zone-a held");
}

#[tokio::test]
async fn leases_of_deleted_nodes_are_collected_or_ignored_and_never_hold_a_zone() {
    let cluster = Cluster::new().await;
    // Two real nodes, each with a gated pod; their leases are owned by their Nodes.
    for n in ["node-a", "node-b"] {
        cluster.add_node(n, "zone-1");
        cluster.add_pod(&format!("web-{n}"), n, true, Some("True"));
    }
    let a = prober(&cluster, "node-a");
    let _b = prober(&cluster, "node-b");
    // Three nodes an autoscaler removed: their leases outlived them (no owner to collect
    // them by), and their probers are gone.
    let ghosts: Vec<_> = (1..=3)
        .map(|i| {
            let n = format!("ghost-{i}");
            cluster.add_pod(&format!("web-{n}"), &n, true, Some("True"));
            ghost_prober(&cluster, &n)
        })
        .collect();
    let (_s, metrics) = start_sentinel(&cluster, "sentinel-0", fast());
    assert!(
        eventually(Duration::from_secs(10), || metrics.leases.get() == 5
            && cluster.lease("node-a").is_some_and(
                |l| l["metadata"]["ownerReferences"][0]["kind"] == "Node"
            ))
        .await,
        "five leases, the real nodes' owned by their Nodes"
    );
    let owner = &cluster.lease("node-a").expect("lease")["metadata"]["ownerReferences"][0];
    assert_eq!(owner["apiVersion"], "v1");
    assert_eq!(owner["name"], "node-a");
    assert!(
        owner["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "{owner}"
    );
    for g in &ghosts {
        g.abort();
    }
    // The ghosts' leases expire: their Nodes are gone, so the sentinel ignores them (3 of 5
    // expired would otherwise be a partially disrupted small zone, where nothing is marked).
    tokio::time::sleep(LEASE + PERIOD * 3).await;
    // A real prober dies: its node is marked.
    a.abort();
    assert!(
        eventually(LEASE + PERIOD + Duration::from_secs(3), || cluster
            .status_writes()
            .iter()
            .any(|w| w.pod == "web-node-a"))
        .await,
        "node-a marked: {:?}",
        cluster.status_writes()
    );
    assert!(
        cluster
            .status_writes()
            .iter()
            .all(|w| w.pod == "web-node-a"),
        "only node-a's pod: {:?}",
        cluster.status_writes()
    );
    // A Node deleted: the garbage collector deletes its lease, and the sentinel forgets it.
    cluster.delete_node("node-a");
    assert!(cluster.lease("node-a").is_none(), "collected with its Node");
    assert!(
        eventually(Duration::from_secs(3), || metrics.leases.get() == 4).await,
        "{}",
        metrics.leases.get()
    );
}
