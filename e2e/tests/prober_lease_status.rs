//! The leases in `podward-prober status` at the HTTP boundary: read through real
//! `kube::Client`s from the e2e API stand-in (`support/prober_sentinel.rs`) that a real node-lease
//! renewer and a real sentinel write: current while the prober renews, expired by how long once
//! it is killed, the sentinel's leader named; an API that cannot be reached is said in one line.

#[path = "support/prober_sentinel.rs"]
mod support;

use std::time::Duration;

use podward_prober::kubernetes::lease::report::{self, LeaseNames};
use support::*;

fn names() -> LeaseNames {
    LeaseNames {
        namespace: "podward".into(),
        node: "node-a".into(),
        election: "podward-sentinel".into(),
    }
}

async fn rendered(cluster: &Cluster) -> String {
    let (node, leader) = report::read(cluster.client(), &names()).await;
    report::render(&names(), &node, &leader, podward_api::time::now_ns())
}

#[tokio::test]
async fn status_shows_the_node_lease_current_then_expired_and_the_sentinels_leader() {
    let cluster = Cluster::new().await;
    let out = rendered(&cluster).await;
    assert!(out.contains("Node lease podward/node-a: none"), "{out}");
    assert!(out.contains("podward/podward-sentinel: none"), "{out}");

    let prober = prober(&cluster, "node-a");
    let (_s, metrics) = start_sentinel(&cluster, "sentinel-0", fast());
    assert!(
        eventually(Duration::from_secs(10), || metrics.leader.get() == 1
            && cluster.lease("node-a").is_some())
        .await
    );
    let out = rendered(&cluster).await;
    assert!(
        out.contains("Node lease podward/node-a: holder node-a, last renewal ")
            && out.contains("duration 2s: current (expires in "),
        "{out}"
    );
    assert!(
        out.contains(
            "Sentinel leader lease podward/podward-sentinel: leader sentinel-0, last renewal "
        ),
        "{out}"
    );

    prober.abort();
    let mut out = String::new();
    let expired = eventually(LEASE + Duration::from_secs(3), || {
        // Rendered synchronously from the stand-in's state (what `read` would get).
        let lease: k8s_openapi::api::coordination::v1::Lease =
            serde_json::from_value(cluster.lease("node-a").expect("lease")).expect("lease");
        out = report::render(
            &names(),
            &Ok(Some(lease)),
            &Ok(None),
            podward_api::time::now_ns(),
        );
        out.contains("EXPIRED")
    })
    .await;
    assert!(expired, "{out}");
    let out = rendered(&cluster).await;
    assert!(
        out.contains(": EXPIRED ")
            && out.contains(" ago: the sentinel marks this node's gated pods False"),
        "{out}"
    );
}

#[tokio::test]
async fn an_api_that_cannot_be_read_is_one_clear_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
             current-context: c\n"
        ),
    )
    .expect("kubeconfig");
    let out = report::section(Some(&kubeconfig), &names(), podward_api::time::now_ns()).await;
    assert!(
        out.starts_with("Leases: cannot read them from the Kubernetes API: ")
            && out.ends_with("(the sentinel's view is unknown)\n")
            && out.lines().count() == 1,
        "{out}"
    );
    let out = report::section(
        Some(&dir.path().join("missing")),
        &names(),
        podward_api::time::now_ns(),
    )
    .await;
    assert!(out.starts_with("Leases: cannot read them"), "{out}");
}
