//! A pod author cannot grow the shim's memory with what they write: containers with 7 MiB of
//! environment each (`envFrom` a few ConfigMaps does it) are created through the shim binary
//! on the real containerd, with a Watch subscriber reading along. The shim's peak RSS stays
//! under its budget, it keeps relaying, the index keeps of the environment only the variable
//! the pod's probes reference, marks the container whose referenced variable is past the bound
//! truncated, and a shim restarted over those containers rebuilds within the same budget.

#[path = "support/shim.rs"]
mod support;

use std::net::SocketAddr;
use std::time::Duration;

use podward_api::cri;
use podward_api::shim::v1::{SnapshotRequest, WatchRequest};
use podward_api::test_util::eventually;
use podward_e2e::{PodSpec, TestNode, free_port};
use support::{lifecycle, one_connection, spawn_shim, wait_rebuilt};

/// Containers created.
const CONTAINERS: usize = 20;
/// Variables of 1 MiB in each container's environment: as much as containerd can still send
/// back in a verbose ContainerStatus (which carries the environment twice, in the OCI spec and
/// in the CRI config, under its own 16 MiB limit), so that the restarted shim reads it.
const BIG_VARS: usize = 7;
/// The shim's peak RSS allowed: docs/shim.md's formula for this node (a 7 MiB request held by
/// the reader and queued to the decoder, one entry per container of a few hundred bytes)
/// with room, and far below what keeping the environment costs (7 MiB per container).
const PEAK_RSS_KIB: u64 = 96 * 1024;

/// `VmHWM` (peak RSS) and `VmRSS` of `pid`, in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// A container config with `BIG_VARS` variables of 1 MiB, a small `SMALL`, and (container 0
/// only) `REF_BIG`, referenced by the probes and past the bound on a container's kept
/// environment (16 KiB).
fn bloated_config(i: usize) -> cri::ContainerConfig {
    let mut config = support::container_config();
    if let Some(md) = config.metadata.as_mut() {
        md.name = format!("c{i}");
    }
    config
        .labels
        .insert("io.kubernetes.container.name".to_owned(), format!("c{i}"));
    config.log_path = format!("c{i}/0.log");
    let mib: String = (0..1 << 20)
        .map(|n| char::from(b'a' + u8::try_from((n + i) % 26).unwrap_or(0)))
        .collect();
    config.envs = (0..BIG_VARS)
        .map(|v| cri::KeyValue {
            key: format!("BIG_{v}"),
            value: mib.clone(),
        })
        .collect();
    config.envs.push(cri::KeyValue {
        key: "SMALL".into(),
        value: format!("small-{i}"),
    });
    if i == 0 {
        config.envs.push(cri::KeyValue {
            key: "REF_BIG".into(),
            value: mib[..17 * 1024].to_owned(),
        });
    }
    config
}

#[tokio::test]
async fn seven_mib_of_environment_per_container_costs_the_shim_nothing() {
    let node = TestNode::start().await.expect("node");
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut shim = spawn_shim(&node, admin).await;
    let (cri_sock, ctl) = (
        node.dir().join("shim.cri.sock"),
        node.dir().join("shim.ctl.sock"),
    );
    wait_rebuilt(&ctl).await;
    let (idle_hwm, _) = rss_kib(shim.pid());

    // A subscriber reading every event as it comes.
    let mut watch = lifecycle(&ctl)
        .watch(WatchRequest { from_seq: 0 })
        .await
        .expect("watch")
        .into_inner();
    let reader = tokio::spawn(async move {
        let mut events = 0usize;
        while let Ok(Some(_)) = watch.message().await {
            events += 1;
        }
        events
    });

    let mut rt = one_connection(&cri_sock).await;
    let sandbox_config = PodSpec::new("bloat")
        .annotation(
            "podward.io/probes",
            r#"{"c0":{"livenessProbe":{"exec":{"command":["sh","-c","test $(SMALL) && test $(REF_BIG)"]}}}}"#,
        )
        .sandbox_config(&node)
        .expect("sandbox config");
    let sid = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let mut ids = Vec::new();
    for i in 0..CONTAINERS {
        let id = rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sid.clone(),
                config: Some(bloated_config(i)),
                sandbox_config: Some(sandbox_config.clone()),
            })
            .await
            .expect("CreateContainer through the shim")
            .into_inner()
            .container_id;
        ids.push(id);
    }
    // Still relaying, and the index has every container.
    rt.version(cri::VersionRequest::default())
        .await
        .expect("Version through the shim");
    eventually("every container indexed", Duration::from_secs(30), || {
        let ctl = ctl.clone();
        async move {
            let mut c = lifecycle(&ctl);
            c.snapshot(SnapshotRequest {})
                .await
                .is_ok_and(|s| s.into_inner().containers.len() == CONTAINERS)
        }
    })
    .await;
    let (peak, now) = rss_kib(shim.pid());
    eprintln!(
        "shim RSS: idle peak {idle_hwm} KiB; after {CONTAINERS} containers of {BIG_VARS} MiB \
         env: peak {peak} KiB, now {now} KiB"
    );
    assert!(shim.exited().is_none(), "the shim is alive");
    assert!(
        peak <= PEAK_RSS_KIB,
        "peak RSS {peak} KiB over the budget {PEAK_RSS_KIB} KiB"
    );

    let snap = lifecycle(&ctl)
        .snapshot(SnapshotRequest {})
        .await
        .expect("snapshot")
        .into_inner();
    for c in &snap.containers {
        let want_small = format!("small-{}", c.name.trim_start_matches('c'));
        let keys: Vec<(&str, &str)> = c
            .envs
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.as_str()))
            .collect();
        assert_eq!(keys, vec![("SMALL", want_small.as_str())], "{}", c.name);
        assert_eq!(c.truncated, c.name == "c0", "{} truncated", c.name);
    }
    let listed = rt
        .list_containers(cri::ListContainersRequest::default())
        .await
        .expect("ListContainers through the shim")
        .into_inner();
    assert_eq!(listed.containers.len(), CONTAINERS);

    // Restarted over them: the rebuild reads only what the index keeps.
    shim.kill9();
    drop(rt);
    let streamed = reader.await.expect("reader");
    eprintln!("the subscriber received {streamed} events");
    let shim = spawn_shim(&node, admin).await;
    wait_rebuilt(&ctl).await;
    eventually("the index rebuilt", Duration::from_secs(60), || {
        let ctl = ctl.clone();
        async move {
            let mut c = lifecycle(&ctl);
            c.snapshot(SnapshotRequest {}).await.is_ok_and(|s| {
                let s = s.into_inner();
                s.containers.len() == CONTAINERS && s.containers.iter().all(|c| !c.envs.is_empty())
            })
        }
    })
    .await;
    let (peak, now) = rss_kib(shim.pid());
    eprintln!("restarted shim RSS after its rebuild: peak {peak} KiB, now {now} KiB");
    assert!(
        peak <= PEAK_RSS_KIB,
        "peak RSS {peak} KiB over the budget {PEAK_RSS_KIB} KiB during the rebuild"
    );
    let snap = lifecycle(&ctl)
        .snapshot(SnapshotRequest {})
        .await
        .expect("snapshot")
        .into_inner();
    assert_eq!(snap.containers.len(), CONTAINERS);
    for c in &snap.containers {
        assert_eq!(
            c.envs.len(),
            1,
            "{}: {:?}",
            c.name,
            c.envs.first().map(|kv| &kv.key)
        );
        assert_eq!(
            c.truncated,
            c.name == "c0",
            "{} truncated after the rebuild",
            c.name
        );
    }
    let _ = ids;
}
