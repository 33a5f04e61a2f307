//! Lists never erase newer truth, on the real containerd.
//!
//! Four clients list every sandbox as fast as they can, each on its own connection, while a
//! kubelet-like client runs pods one after another on its own connection and asks each one's
//! status (its pod IP), as kubelet does. Many of those Lists were sent before a sandbox was in
//! containerd's store and are read after its RunPodSandbox, and containerd's own Lists leave a
//! sandbox out for a few milliseconds right after its RunPodSandbox returned (between Lists that
//! hold it): none of them may remove it, and every pod keeps its IP in the index.

#[path = "support/shim.rs"]
mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use podward_api::cri;
use podward_api::shim::v1::{SandboxEventKind, SnapshotRequest, WatchRequest, watch_event};
use podward_api::test_util::eventually;
use podward_e2e::{PodSpec, TestNode};
use support::{InProcShim, lifecycle, one_connection};

/// Pods run (few enough that the List answer stays under one HTTP/2 frame, so that every answer
/// is read: larger repeating answers are read at most every 250 ms).
const PODS: usize = 24;
/// Clients listing at once.
const LISTERS: usize = 4;

#[tokio::test]
async fn lists_read_after_a_run_pod_sandbox_never_remove_it_nor_its_ip() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;

    let removed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut watch = lifecycle(&shim.control)
        .watch(WatchRequest { from_seq: 0 })
        .await
        .expect("watch")
        .into_inner();
    let seen = Arc::clone(&removed);
    let watcher = tokio::spawn(async move {
        while let Ok(Some(ev)) = watch.message().await {
            if let Some(watch_event::Event::Sandbox(s)) = ev.event
                && s.kind == SandboxEventKind::SandboxEventRemoved as i32
                && let Some(sb) = s.sandbox
            {
                seen.lock().insert(sb.id);
            }
        }
    });

    let stop = Arc::new(AtomicBool::new(false));
    let lists = Arc::new(AtomicUsize::new(0));
    let mut listers = Vec::new();
    for _ in 0..LISTERS {
        let mut c = one_connection(&shim.cri).await;
        let (stop, lists) = (Arc::clone(&stop), Arc::clone(&lists));
        listers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                c.list_pod_sandbox(cri::ListPodSandboxRequest::default())
                    .await
                    .expect("ListPodSandbox through the shim");
                lists.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }

    let mut rt = one_connection(&shim.cri).await;
    let mut pods = Vec::new();
    for i in 0..PODS {
        let config = PodSpec::new(&format!("race-{i}"))
            .pod_network()
            .sandbox_config(&node)
            .expect("sandbox config");
        let sid = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            })
            .await
            .expect("RunPodSandbox")
            .into_inner()
            .pod_sandbox_id;
        let ip = rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: sid.clone(),
                verbose: false,
            })
            .await
            .expect("PodSandboxStatus")
            .into_inner()
            .status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .unwrap_or_default();
        assert!(!ip.is_empty(), "containerd gave pod {i} an IP");
        pods.push((sid, ip));
    }
    // kubelet's later status calls repeat the first answers.
    for (sid, _) in &pods {
        rt.pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: sid.clone(),
            verbose: false,
        })
        .await
        .expect("PodSandboxStatus");
    }
    stop.store(true, Ordering::Relaxed);
    for l in listers {
        l.await.expect("lister");
    }
    eprintln!(
        "{} Lists by {LISTERS} clients while {PODS} pods were run",
        lists.load(Ordering::Relaxed)
    );

    eventually("the decoder caught up", Duration::from_secs(10), || {
        let control = shim.control.clone();
        async move {
            lifecycle(&control)
                .snapshot(SnapshotRequest {})
                .await
                .is_ok_and(|s| s.into_inner().sandboxes.len() >= PODS)
        }
    })
    .await;
    let snap = lifecycle(&shim.control)
        .snapshot(SnapshotRequest {})
        .await
        .expect("snapshot")
        .into_inner();
    let removed = removed.lock().clone();

    let mut lost = Vec::new();
    for (i, (sid, ip)) in pods.iter().enumerate() {
        let entry = snap.sandboxes.iter().find(|s| &s.id == sid);
        let kept_ip = entry.map(|s| s.pod_ip.clone()).unwrap_or_default();
        if removed.contains(sid) || &kept_ip != ip {
            lost.push(format!(
                "pod {i}: removed {} ip {kept_ip:?} (containerd's {ip})",
                removed.contains(sid)
            ));
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {PODS} pods lost their entry or IP: {lost:#?}",
        lost.len()
    );
    watcher.abort();
}
