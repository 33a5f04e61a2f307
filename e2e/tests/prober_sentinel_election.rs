//! Two sentinels, one leader: at the HTTP boundary against the e2e API stand-in, exactly
//! one replica holds the leader lease and only it writes; the leader killed (its task dropped
//! with every child, as by SIGKILL: the lease is not released) is replaced within a leader lease
//! duration (plus a retry period), and the new leader marks a prober that dies after it.

#[path = "support/prober_sentinel.rs"]
mod support;

use std::time::{Duration, SystemTime};

use support::*;
use tokio::time::Instant;

/// The leader lease's duration and retry period in `support::settings`.
const LEADER_LEASE: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(200);

fn holder(cluster: &Cluster) -> String {
    cluster
        .lease("podward-sentinel")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test]
async fn two_sentinels_elect_one_leader_and_a_killed_leader_hands_over_within_a_lease_duration() {
    let cluster = Cluster::new().await;
    for n in ["node-a", "node-b", "node-c"] {
        cluster.add_pod(&format!("web-{n}"), n, true, Some("True"));
    }
    let a = prober(&cluster, "node-a");
    let b = prober(&cluster, "node-b");
    let _c = prober(&cluster, "node-c");
    let (s0, m0) = start_sentinel(&cluster, "sentinel-0", fast());
    let (s1, m1) = start_sentinel(&cluster, "sentinel-1", fast());
    assert!(
        eventually(Duration::from_secs(10), || m0.leader.get()
            + m1.leader.get()
            == 1)
        .await,
        "one leader"
    );
    // Stays one leader over several retry periods, and it is the lease's holder.
    for _ in 0..10 {
        tokio::time::sleep(RETRY).await;
        assert_eq!(m0.leader.get() + m1.leader.get(), 1, "exactly one leader");
    }
    let (leader, follower, leader_task, follower_metrics) = if m0.leader.get() == 1 {
        ("sentinel-0", "sentinel-1", s0, m1)
    } else {
        ("sentinel-1", "sentinel-0", s1, m0)
    };
    assert_eq!(holder(&cluster), leader);

    // A prober dies: only the leader marks.
    a.abort();
    assert!(eventually(LEASE * 3, || cluster.status_writes().len() == 1).await);
    assert!(cluster.status_writes().iter().all(|w| w.who == leader));

    // The leader is killed: no release, its lease has to run out.
    leader_task.abort();
    let killed = Instant::now();
    assert!(
        eventually(LEADER_LEASE * 3, || follower_metrics.leader.get() == 1).await,
        "the follower takes over"
    );
    let took = killed.elapsed();
    assert!(
        took <= LEADER_LEASE + RETRY * 3,
        "handover in {took:?}, more than a lease duration and a retry period"
    );
    assert_eq!(holder(&cluster), follower);

    // The new leader marks the next prober that dies.
    b.abort();
    assert!(
        eventually(LEASE * 3, || cluster
            .status_writes()
            .iter()
            .any(|w| w.pod == "web-node-b" && w.who == follower))
        .await,
        "{:?}",
        cluster.status_writes()
    );
    assert!(
        cluster
            .status_writes()
            .iter()
            .all(|w| w.pod != "web-node-c"),
        "node-c's prober is alive"
    );
}

/// The renew deadline in `support::settings`.
const RENEW_DEADLINE: Duration = Duration::from_secs(2);

/// Two sentinels and their leader: (leader, follower, leader's task, follower's task).
async fn two_sentinels(
    cluster: &Cluster,
) -> (
    String,
    String,
    tokio::task::JoinHandle<()>,
    tokio::task::JoinHandle<()>,
) {
    let (s0, m0) = start_sentinel(cluster, "sentinel-0", fast());
    let (s1, m1) = start_sentinel(cluster, "sentinel-1", fast());
    assert!(
        eventually(Duration::from_secs(10), || m0.leader.get()
            + m1.leader.get()
            == 1)
        .await,
        "one leader"
    );
    if m0.leader.get() == 1 {
        ("sentinel-0".into(), "sentinel-1".into(), s0, s1)
    } else {
        ("sentinel-1".into(), "sentinel-0".into(), s1, s0)
    }
}

#[tokio::test]
async fn a_hung_leader_never_writes_after_its_renew_deadline_and_exits() {
    let cluster = Cluster::new().await;
    for n in ["node-a", "node-b"] {
        cluster.add_pod(&format!("web-{n}"), n, true, Some("True"));
    }
    let a = prober(&cluster, "node-a");
    let _b = prober(&cluster, "node-b");
    let (leader, follower, leader_task, _f) = two_sentinels(&cluster).await;
    // The leader's renewals hang (its other requests still go through).
    cluster.stall(&leader, "/leases/podward-sentinel");
    let stalled = SystemTime::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.abort();
    assert!(
        eventually(LEADER_LEASE + LEASE + Duration::from_secs(3), || cluster
            .status_writes()
            .iter()
            .any(|w| w.pod == "web-node-a"))
        .await,
        "node-a marked"
    );
    let writes = cluster.status_writes();
    for w in &writes {
        if w.who == leader {
            let after = w.at.duration_since(stalled).unwrap_or_default();
            assert!(
                after < RENEW_DEADLINE,
                "the hung leader wrote {after:?} after its last renewal: {w:?}"
            );
        }
    }
    assert!(
        writes.iter().any(|w| w.who == follower),
        "the other replica marked: {writes:?}"
    );
    assert!(
        eventually(Duration::from_secs(2), || leader_task.is_finished()).await,
        "the leader that lost its lease exits"
    );
    cluster.unstall();
}

#[tokio::test]
async fn the_leader_killed_while_a_node_is_expired_the_other_marks_within_both_lease_durations() {
    let cluster = Cluster::new().await;
    for n in ["node-a", "node-b", "node-c"] {
        cluster.add_pod(&format!("web-{n}"), n, true, Some("True"));
    }
    let a = prober(&cluster, "node-a");
    let _b = prober(&cluster, "node-b");
    let _c = prober(&cluster, "node-c");
    let (_leader, follower, leader_task, _f) = two_sentinels(&cluster).await;
    // The leader dies (no release) as node-a's prober does.
    leader_task.abort();
    a.abort();
    let killed = Instant::now();
    assert!(
        eventually(LEADER_LEASE + LEASE + Duration::from_secs(3), || cluster
            .status_writes()
            .iter()
            .any(|w| w.pod == "web-node-a"))
        .await,
        "{:?}",
        cluster.status_writes()
    );
    let took = killed.elapsed();
    assert!(
        took <= LEADER_LEASE + LEASE + RETRY * 3 + PERIOD * 2,
        "marked {took:?} after the kill (leader lease {LEADER_LEASE:?} + node lease {LEASE:?})"
    );
    assert!(
        cluster
            .status_writes()
            .iter()
            .all(|w| w.who == follower && w.pod == "web-node-a"),
        "{:?}",
        cluster.status_writes()
    );
}
