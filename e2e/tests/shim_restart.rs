//! The shim under stress on the real containerd: kill -9 under load (a new shim rebuilds the
//! same index; a client that retries loses nothing) and a subscriber that stops reading (kubelet's
//! calls are not slowed; the subscriber later gets a resync snapshot, never a gap).

#[path = "support/shim.rs"]
mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use podward_api::cri;
use podward_api::shim::v1::{Container, Sandbox, Snapshot, WatchRequest, watch_event};
use podward_api::test_util::eventually;
use podward_e2e::{ContainerSpec, Driver, PodSpec, RestartPolicy, TestNode, free_port};
use support::{InProcShim, lifecycle, snapshot, spawn_shim, wait_rebuilt};

/// What must survive a restart: everything the runtime knows (delivery and stop-request times
/// only the CRI path knew; start times came from the shim's own clock before the restart).
fn sandbox_key(s: &Sandbox) -> String {
    let labels: BTreeMap<_, _> = s.labels.iter().collect();
    let annotations: BTreeMap<_, _> = s.annotations.iter().collect();
    format!(
        "{} {}/{} uid={} attempt={} state={} hostnet={} ip={} {labels:?} {annotations:?}",
        s.id, s.namespace, s.name, s.uid, s.attempt, s.state, s.host_network, s.pod_ip
    )
}

fn container_key(c: &Container) -> String {
    let labels: BTreeMap<_, _> = c.labels.iter().collect();
    let annotations: BTreeMap<_, _> = c.annotations.iter().collect();
    format!(
        "{} sb={} pod={} {} attempt={} state={} exit={} {labels:?} {annotations:?}",
        c.id, c.sandbox_id, c.pod_uid, c.name, c.attempt, c.state, c.exit_code
    )
}

fn keys(s: &Snapshot) -> (Vec<String>, Vec<String>) {
    let mut sb: Vec<String> = s.sandboxes.iter().map(sandbox_key).collect();
    let mut ct: Vec<String> = s.containers.iter().map(container_key).collect();
    sb.sort();
    ct.sort();
    (sb, ct)
}

#[tokio::test]
async fn kill9_under_load_new_shim_rebuilds_the_same_index_and_retries_lose_nothing() {
    let node = TestNode::start().await.expect("node");
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut shim = spawn_shim(&node, admin).await;
    let (cri, ctl) = (
        node.dir().join("shim.cri.sock"),
        node.dir().join("shim.ctl.sock"),
    );
    wait_rebuilt(&ctl).await;

    let driver = Driver::connect(&cri).await.expect("driver via shim");
    let mut pods = Vec::new();
    for i in 0..3 {
        let spec = PodSpec::new(&format!("load-{i}"))
            .grace_period(1)
            // The probe expands $(FOO): the index keeps that variable of the environment.
            .annotation(
                "podward.io/probes",
                &format!("{{\"n\":{i},\"cmd\":\"echo $(FOO)\"}}"),
            )
            .container(
                ContainerSpec::new("main", &["sleep", "3600"]).env("FOO", &format!("bar-{i}")),
            );
        pods.push(driver.run_pod(&node, spec).await.expect("pod"));
    }
    let exited = PodSpec::new("done")
        .restart_policy(RestartPolicy::Never)
        .container(ContainerSpec::new("main", &["sh", "-c", "exit 2"]));
    pods.push(driver.run_pod(&node, exited).await.expect("pod"));
    eventually("index complete", Duration::from_secs(20), || {
        let ctl = ctl.clone();
        async move {
            let s = snapshot(&ctl).await;
            s.sandboxes.len() == 4
                && s.containers.len() == 4
                && s.containers
                    .iter()
                    .any(|c| c.exit_code == 2 && c.finished_at_ns != 0)
        }
    })
    .await;
    let before = snapshot(&ctl).await;

    // Load: a client making calls through the shim, retrying each until it succeeds.
    let done = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let load = {
        let (cri, done, retries) = (cri.clone(), done.clone(), retries.clone());
        tokio::spawn(async move {
            let mut client = cri::runtime_service_client::RuntimeServiceClient::new(
                podward_api::socket::channel(cri),
            );
            for _ in 0..300 {
                loop {
                    match client
                        .list_containers(cri::ListContainersRequest::default())
                        .await
                    {
                        Ok(r) => {
                            assert_eq!(r.into_inner().containers.len(), 4);
                            break;
                        }
                        Err(_) => {
                            retries.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    eventually("load running", Duration::from_secs(10), || {
        let n = done.load(Ordering::Relaxed);
        async move { n >= 20 }
    })
    .await;
    shim.kill9();
    let killed_at = Instant::now();
    let _new = spawn_shim(&node, admin).await;
    wait_rebuilt(&ctl).await;
    eprintln!(
        "shim: restarted and connected {:?} after kill -9",
        killed_at.elapsed()
    );
    // The driver's relists reach the new shim too (and can show a container before the rebuild
    // has its exit code): wait until the rebuild has landed, then it must equal the old index.
    let want = keys(&before);
    let after = loop {
        let s = snapshot(&ctl).await;
        if keys(&s) == want {
            break s;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "rebuilt index differs:\n{:#?}\nvs\n{want:#?}",
            keys(&s)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!(
        "shim: index rebuilt identical {:?} after kill -9",
        killed_at.elapsed()
    );
    assert_ne!(before.instance_id, after.instance_id);
    // The environment the probes reference comes back from the OCI spec.
    assert!(
        before
            .containers
            .iter()
            .any(|c| c.envs.iter().any(|kv| kv.key == "FOO")),
        "the probes' variable is indexed: {:?}",
        before.containers
    );
    for c in &before.containers {
        let a = after
            .containers
            .iter()
            .find(|x| x.id == c.id)
            .expect("same container");
        for kv in &c.envs {
            assert!(a.envs.contains(kv), "{:?} lost from {:?}", kv, a.envs);
        }
    }
    tokio::time::timeout(Duration::from_secs(60), load)
        .await
        .expect("load finishes")
        .expect("load task");
    assert_eq!(
        done.load(Ordering::Relaxed),
        300,
        "every call eventually succeeded"
    );
    eprintln!(
        "shim: load client retried {} times across the restart",
        retries.load(Ordering::Relaxed)
    );
    for p in pods {
        p.delete().await.expect("delete");
    }
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_slows_nothing_and_later_resyncs() {
    const PODS: usize = 24;
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start_with(&node, |c| c.subscriber_queue = 4).await;
    let mut stuck = lifecycle(&shim.control)
        .watch(WatchRequest { from_seq: 0 })
        .await
        .expect("watch")
        .into_inner();
    let first = stuck.message().await.expect("rpc").expect("snapshot");
    let mut last_seq = first.seq;

    // Big pod annotations make big events: the HTTP/2 buffers (the client's 2 MiB stream
    // window, the server's send buffer) fill up, then the 4-slot queue overflows. The one
    // annotation the index keeps at this size is the probes' (up to 256 KiB).
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(250 * 1024));
    let driver = Driver::connect(&shim.cri).await.expect("driver");
    let mut pods = Vec::new();
    for i in 0..PODS {
        let spec = PodSpec::new(&format!("big-{i}"))
            .grace_period(1)
            .annotation("podward.io/probes", &big)
            .container(ContainerSpec::new("main", &["sleep", "3600"]));
        pods.push(driver.run_pod(&node, spec).await.expect("pod"));
    }
    eventually("subscriber overflowed", Duration::from_secs(20), || {
        let resync_owed = shim.metrics_text();
        async move { resync_owed.contains(&format!("podward_shim_index_sandboxes {PODS}")) }
    })
    .await;

    // kubelet's calls while the subscriber is stuck: as fast as direct.
    let mut via = driver.client();
    let mut direct = node.runtime_client().await;
    let mut t_via = Vec::new();
    let mut t_direct = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        via.version(cri::VersionRequest::default())
            .await
            .expect("version via shim");
        t_via.push(t.elapsed());
        let t = Instant::now();
        direct
            .version(cri::VersionRequest::default())
            .await
            .expect("version direct");
        t_direct.push(t.elapsed());
    }
    t_via.sort();
    t_direct.sort();
    eprintln!(
        "shim: Version p50 via shim {:?}, direct {:?} while a subscriber is stuck",
        t_via[25], t_direct[25]
    );
    assert!(
        t_via[25] < t_direct[25] + Duration::from_millis(5),
        "{t_via:?} vs {t_direct:?}"
    );

    // Now read: queued events without a gap, then a resync snapshot with everything.
    let snap = loop {
        let ev = tokio::time::timeout(Duration::from_secs(20), stuck.message())
            .await
            .expect("events in time")
            .expect("rpc")
            .expect("open");
        if let Some(watch_event::Event::Snapshot(s)) = ev.event {
            break s;
        }
        assert_eq!(ev.seq, last_seq + 1, "no gap before the resync");
        last_seq = ev.seq;
    };
    assert!(snap.resync);
    assert_eq!(snap.sandboxes.len(), PODS);
    assert!(shim.metrics_text().contains("podward_shim_resyncs_total 1"));
    // And the stream goes on right after the snapshot's sequence number.
    let p = driver
        .run_pod(
            &node,
            PodSpec::new("after")
                .grace_period(1)
                .container(ContainerSpec::new("main", &["sleep", "3600"])),
        )
        .await
        .expect("pod");
    let ev = tokio::time::timeout(Duration::from_secs(20), stuck.message())
        .await
        .expect("event in time")
        .expect("rpc")
        .expect("open");
    assert_eq!(ev.seq, snap.seq + 1);
    pods.push(p);
    for p in pods {
        p.delete().await.expect("delete");
    }
    shim.stop().await;
}
