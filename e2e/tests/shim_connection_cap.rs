//! No cap closes observation of a connection for the rest of its life, on the real containerd.
//!
//! Twenty CreateContainer calls of 11 MiB each, at once on kubelet's one connection, hold more
//! than the reader keeps per connection (64 MiB): the calls past it are relayed unobserved
//! (counted, the index relisted). Once they are done, a pod run on the same connection is
//! observed from its own call: it reaches Watch as delivered, which only the CRI path can tell
//! (a relist learns objects with an unknown delivery), and the connection was never given up.

#[path = "support/shim.rs"]
mod support;

use std::time::Duration;

use podward_api::cri;
use podward_api::shim::v1::{Delivery, WatchRequest, watch_event};
use podward_e2e::{PodSpec, TestNode};
use support::{InProcShim, lifecycle, metric, one_connection};

/// Calls at once, and the environment each carries.
const CALLS: usize = 20;
const ENV_MIB: usize = 11;

#[tokio::test]
async fn a_connection_past_its_cap_is_observed_again_from_its_next_call() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let rt = one_connection(&shim.cri).await;

    let sandbox_config = PodSpec::new("bulk")
        .sandbox_config(&node)
        .expect("sandbox config");
    let sid = rt
        .clone()
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let mib = "e".repeat(1 << 20);
    let calls = (0..CALLS).map(|i| {
        let mut rt = rt.clone();
        let mut config = support::container_config();
        if let Some(md) = config.metadata.as_mut() {
            md.name = format!("c{i}");
        }
        config.log_path = format!("c{i}/0.log");
        config.envs = (0..ENV_MIB)
            .map(|v| cri::KeyValue {
                key: format!("E{v}"),
                value: mib.clone(),
            })
            .collect();
        let request = cri::CreateContainerRequest {
            pod_sandbox_id: sid.clone(),
            config: Some(config),
            sandbox_config: Some(sandbox_config.clone()),
        };
        async move { rt.create_container(request).await }
    });
    let calls: Vec<_> = calls.map(tokio::spawn).collect();
    for c in calls {
        c.await
            .expect("task")
            .expect("CreateContainer through the shim");
    }
    let text = shim.metrics_text();
    let skipped = metric(&text, "podward_shim_observations_dropped_total");
    eprintln!("{skipped} of {CALLS} calls relayed unobserved");
    assert!(skipped > 0.0, "the calls passed the per-connection cap");
    assert_eq!(metric(&text, "podward_shim_observe_errors_total"), 0.0);
    assert_eq!(metric(&text, "podward_shim_unobserved_connections"), 0.0);

    // The next pod on the same connection is seen from its own call.
    let mut watch = lifecycle(&shim.control)
        .watch(WatchRequest { from_seq: 0 })
        .await
        .expect("watch")
        .into_inner();
    watch.message().await.expect("rpc").expect("snapshot");
    let next = rt
        .clone()
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(
                PodSpec::new("after")
                    .sandbox_config(&node)
                    .expect("sandbox config"),
            ),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let ev = watch.message().await.expect("rpc").expect("stream open");
            if let Some(watch_event::Event::Sandbox(s)) = ev.event
                && let Some(sb) = s.sandbox
                && sb.id == next
                && sb.run_delivery == Delivery::Delivered as i32
            {
                return;
            }
        }
    })
    .await;
    assert!(
        seen.is_ok(),
        "the pod reached Watch as delivered: observed from its RunPodSandbox call, not only \
         learned by a relist"
    );
}
