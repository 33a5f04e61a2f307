//! `--probe-host-policy` on the spec: a probe it refuses before any dial is a spec error with no
//! worker; the pod's other probes run.

use std::net::IpAddr;

use super::harness::*;
use crate::handler::host_policy::{HostPolicy, NodePolicy};
use crate::pods::manager::Settings;
use crate::spec::ProbeType;

const SPEC: &str = r#"{"app":{
    "livenessProbe":{"tcpSocket":{"host":"169.254.169.254","port":80},"periodSeconds":1},
    "readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1},
    "startupProbe":{"httpGet":{"host":"db.example","port":80},"periodSeconds":1}}}"#;

const NODE_IP: &str = "10.255.0.1";

async fn node_with(policy: HostPolicy, node_ip: &str) -> Node {
    let node_ip: IpAddr = node_ip.parse().expect("ip");
    let n = Node::steady_with(|| Settings {
        host_policy: Some(NodePolicy::new(policy, node_ip)),
        ..Settings::default()
    })
    .await;
    n.manager
        .update_pod(pod("u", SPEC, vec![running(&n.clock, "a1", "app", 0, S)]));
    run_for(2 * S).await;
    n
}

fn spec_errors(n: &Node) -> Vec<(String, String)> {
    n.manager.view().status(Some("u")).pods[0]
        .spec_errors
        .iter()
        .map(|e| (e.field.clone(), e.message.clone()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn deny_local_refuses_a_metadata_host_literal_as_a_spec_error_with_no_worker() {
    let n = node_with(HostPolicy::DenyLocal, NODE_IP).await;
    let errs = spec_errors(&n);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].0, "livenessProbe.tcpSocket.host");
    assert!(errs[0].1.contains("link-local"), "{errs:?}");
    assert_eq!(
        n.manager.registry().worker_count(),
        2,
        "startup (a name) and readiness run"
    );
    assert!(n.script.calls_of(ProbeType::Liveness).is_empty());
}

#[tokio::test(start_paused = true)]
async fn deny_refuses_every_probe_that_names_a_host() {
    let n = node_with(HostPolicy::Deny, NODE_IP).await;
    let mut fields: Vec<String> = spec_errors(&n).into_iter().map(|e| e.0).collect();
    fields.sort();
    assert_eq!(
        fields,
        ["livenessProbe.tcpSocket.host", "startupProbe.httpGet.host"]
    );
    assert_eq!(
        n.manager.registry().worker_count(),
        1,
        "only readiness runs"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hostnetwork_pod_and_kubelets_policy_keep_every_probe() {
    // The harness's pods are probed at 127.0.0.1: that is the node IP of a hostNetwork pod.
    let n = node_with(HostPolicy::DenyLocal, "127.0.0.1").await;
    assert!(spec_errors(&n).is_empty());
    assert_eq!(n.manager.registry().worker_count(), 3);
    let n = node_with(HostPolicy::Allow, NODE_IP).await;
    assert!(spec_errors(&n).is_empty());
    assert_eq!(n.manager.registry().worker_count(), 3);
}
