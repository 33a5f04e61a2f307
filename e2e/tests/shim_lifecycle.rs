//! The shim on the real containerd: the driver's pod lifecycle through the shim gives the same
//! responses as direct, unknown methods fail the same way, Watch reports the lifecycle in
//! order with exits within 100 ms, and relists of labelled pods are recognised as repeats.

#[path = "support/shim.rs"]
mod support;

use std::time::Duration;

use podward_api::cri;
use podward_api::shim::v1::{
    ContainerEventKind as CK, SandboxEventKind as SK, WatchRequest, watch_event,
};
use podward_e2e::{ContainerSpec, Driver, PodSpec, RestartPolicy, TestNode};
use support::{InProcShim, call_path, lifecycle};

#[tokio::test]
async fn driver_pod_lifecycle_through_the_shim_equals_direct() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let via_shim = Driver::connect(&shim.cri).await.expect("driver via shim");
    let direct = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver direct");

    let spec = |name: &str| {
        PodSpec::new(name)
            .grace_period(2)
            .annotation("podward.io/probes", "{}")
            .container(ContainerSpec::new("main", &["sleep", "3600"]).env("GREETING", "hi"))
    };
    let p_shim = via_shim
        .run_pod(&node, spec("same"))
        .await
        .expect("pod via shim");

    // The same objects, read through the shim and directly, are byte-identical answers.
    let mut rs = via_shim.client();
    let mut rd = direct.client();
    let sid = p_shim.sandbox_id().to_owned();
    let cid = p_shim.container_id("main").expect("container id");
    let st_s = rs
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: sid.clone(),
            verbose: true,
        })
        .await
        .expect("status via shim")
        .into_inner();
    let st_d = rd
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: sid.clone(),
            verbose: true,
        })
        .await
        .expect("status direct")
        .into_inner();
    assert_eq!(st_s.status, st_d.status);
    assert_eq!(st_s.info, st_d.info);
    let c_s = rs
        .container_status(cri::ContainerStatusRequest {
            container_id: cid.clone(),
            verbose: true,
        })
        .await
        .expect("container status via shim")
        .into_inner();
    let c_d = rd
        .container_status(cri::ContainerStatusRequest {
            container_id: cid.clone(),
            verbose: true,
        })
        .await
        .expect("container status direct")
        .into_inner();
    assert_eq!(c_s.status, c_d.status);
    let l_s = rs
        .list_containers(cri::ListContainersRequest::default())
        .await
        .expect("list")
        .into_inner();
    let l_d = rd
        .list_containers(cri::ListContainersRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert_eq!(l_s, l_d);

    let out = p_shim
        .exec_sync(
            "main",
            &["sh", "-c", "echo $GREETING; exit 4"],
            Duration::from_secs(10),
        )
        .await
        .expect("exec via shim");
    assert_eq!((out.stdout.as_slice(), out.exit_code), (&b"hi\n"[..], 4));

    // A pod run directly has the same shape (IDs and times masked) as the one run via the shim.
    p_shim.delete().await.expect("delete via shim");
    let gone = rd
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: sid,
            verbose: false,
        })
        .await
        .expect_err("removed");
    assert_eq!(gone.code(), tonic::Code::NotFound);
    let p_direct = direct
        .run_pod(&node, spec("same"))
        .await
        .expect("pod direct");
    let st2 = rd
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: p_direct.sandbox_id().to_owned(),
            verbose: false,
        })
        .await
        .expect("status")
        .into_inner()
        .status
        .expect("status");
    let mut st1 = st_s.status.expect("status");
    let mut st2 = st2;
    for s in [&mut st1, &mut st2] {
        s.id.clear();
        s.created_at = 0;
        s.labels.remove("io.kubernetes.pod.uid");
        if let Some(m) = s.metadata.as_mut() {
            m.uid.clear();
        }
    }
    assert_eq!(st1, st2);
    p_direct.delete().await.expect("delete direct");
    shim.stop().await;
}

#[tokio::test]
async fn unknown_method_is_unimplemented_through_the_shim_as_direct() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    const PATH: &str = "/runtime.v1.RuntimeService/DoesNotExist";
    let direct = call_path(&node.containerd_socket(), PATH)
        .await
        .expect_err("direct fails");
    let proxied = call_path(&shim.cri, PATH)
        .await
        .expect_err("via shim fails");
    assert_eq!(direct.code(), tonic::Code::Unimplemented);
    assert_eq!(proxied.code(), direct.code());
    assert_eq!(proxied.message(), direct.message());
    // containerd's own (non-CRI) services pass too.
    const VERSION: &str = "/containerd.services.version.v1.Version/Version";
    let d = call_path(&node.containerd_socket(), VERSION)
        .await
        .map_err(|s| s.code());
    let p = call_path(&shim.cri, VERSION).await.map_err(|s| s.code());
    assert_eq!(p, d);
    shim.stop().await;
}

#[tokio::test]
async fn watch_reports_the_lifecycle_in_order_with_exit_codes_within_100ms() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let mut watch = lifecycle(&shim.control)
        .watch(WatchRequest { from_seq: 0 })
        .await
        .expect("watch")
        .into_inner();
    let first = watch.message().await.expect("rpc").expect("snapshot");
    let Some(watch_event::Event::Snapshot(snap)) = first.event else {
        panic!("Watch must start with a snapshot")
    };
    let mut last_seq = snap.seq;

    let driver = Driver::connect(&shim.cri).await.expect("driver");
    let pod = driver
        .run_pod(
            &node,
            PodSpec::new("exiter")
                .restart_policy(RestartPolicy::Never)
                .container(ContainerSpec::new("main", &["sh", "-c", "sleep 1; exit 3"])),
        )
        .await
        .expect("pod");
    let sid = pod.sandbox_id().to_owned();
    let cid = pod.container_id("main").expect("cid");

    let mut seen = Vec::new();
    let exit = loop {
        let ev = tokio::time::timeout(Duration::from_secs(20), watch.message())
            .await
            .expect("events keep coming")
            .expect("rpc")
            .expect("stream open");
        assert_eq!(ev.seq, last_seq + 1, "no gap, no reordering");
        last_seq = ev.seq;
        match ev.event {
            Some(watch_event::Event::Sandbox(s)) => {
                let sb = s.sandbox.expect("sandbox");
                if sb.id == sid {
                    seen.push(format!(
                        "sandbox:{}",
                        SK::try_from(s.kind).expect("kind").as_str_name()
                    ));
                }
            }
            Some(watch_event::Event::Container(c)) => {
                let ct = c.container.expect("container");
                if ct.id == cid {
                    seen.push(format!(
                        "container:{}",
                        CK::try_from(c.kind).expect("kind").as_str_name()
                    ));
                    if c.kind == CK::ContainerEventExited as i32 && ct.finished_at_ns != 0 {
                        break (ct, ev.observed_at_ns);
                    }
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    let (ct, observed_at_ns) = exit;
    assert_eq!(ct.exit_code, 3);
    let pos = |k: &str| {
        seen.iter()
            .position(|s| s == k)
            .unwrap_or_else(|| panic!("{k} missing in {seen:?}"))
    };
    assert!(
        pos("sandbox:SANDBOX_EVENT_CREATED") < pos("container:CONTAINER_EVENT_CREATED"),
        "{seen:?}"
    );
    assert!(
        pos("container:CONTAINER_EVENT_CREATED") < pos("container:CONTAINER_EVENT_STARTED"),
        "{seen:?}"
    );
    assert!(
        pos("container:CONTAINER_EVENT_STARTED") < seen.len() - 1,
        "{seen:?}"
    );
    // finished_at_ns is containerd's TaskExit.exited_at: the exit as the runtime saw it.
    let latency_ms = (observed_at_ns - ct.finished_at_ns) as f64 / 1e6;
    eprintln!("shim: exit observed {latency_ms:.2} ms after containerd's exited_at");
    assert!(latency_ms < 100.0, "exit seen after {latency_ms} ms");

    pod.delete().await.expect("delete");
    let mut removed = false;
    while !removed {
        let ev = tokio::time::timeout(Duration::from_secs(20), watch.message())
            .await
            .expect("events keep coming")
            .expect("rpc")
            .expect("stream open");
        assert_eq!(ev.seq, last_seq + 1);
        last_seq = ev.seq;
        if let Some(watch_event::Event::Sandbox(s)) = ev.event {
            removed =
                s.kind == SK::SandboxEventRemoved as i32 && s.sandbox.is_some_and(|x| x.id == sid);
        }
    }
    shim.stop().await;
}

/// kubelet relists every second, and on a node every sandbox and container carries several
/// labels and annotations, whose entries containerd writes in any order. The shim must still
/// recognise the unchanged answers of all four watched reads as repeats (neither queued nor
/// decoded): before the digest knew where CRI's maps are, such answers were news on nearly
/// every call.
#[tokio::test]
async fn relists_of_labelled_pods_are_recognised_as_repeats() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let driver = Driver::connect(&shim.cri).await.expect("driver");
    let pod = driver
        .run_pod(
            &node,
            PodSpec::new("relisted")
                .label("app", "web")
                .label("tier", "front")
                .annotation("team", "node")
                .annotation("podward.io/probes", "{}")
                .container(ContainerSpec::new("main", &["sleep", "3600"])),
        )
        .await
        .expect("pod");
    let sid = pod.sandbox_id().to_owned();
    let cid = pod.container_id("main").expect("cid");
    let mut c = cri::runtime_service_client::RuntimeServiceClient::new(
        podward_api::socket::channel(shim.cri.clone()),
    );
    let unchanged = || {
        shim.metrics_text()
            .lines()
            .find_map(|l| l.strip_prefix("podward_shim_answers_unchanged_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = unchanged();
    const ROUNDS: usize = 20;
    for round in 0..ROUNDS {
        c.list_pod_sandbox(cri::ListPodSandboxRequest::default())
            .await
            .expect("ListPodSandbox");
        c.list_containers(cri::ListContainersRequest::default())
            .await
            .expect("ListContainers");
        let sandbox = c
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: sid.clone(),
                verbose: false,
            })
            .await
            .expect("PodSandboxStatus")
            .into_inner()
            .status
            .expect("status");
        let container = c
            .container_status(cri::ContainerStatusRequest {
                container_id: cid.clone(),
                verbose: false,
            })
            .await
            .expect("ContainerStatus")
            .into_inner()
            .status
            .expect("status");
        if round == 0 {
            // What makes the order vary: more than one entry in each map.
            assert!(
                sandbox.labels.len() >= 3 && sandbox.annotations.len() >= 2,
                "{sandbox:?}"
            );
            assert!(
                container.labels.len() >= 3 && container.annotations.len() >= 3,
                "{container:?}"
            );
        }
    }
    // Every round but the first of each read is a repeat (the first may be news); the count
    // is taken once the relay has settled the last call.
    let want = before + (4 * (ROUNDS - 1)) as f64;
    support::wait_until(
        &format!("{want} unchanged answers (had {before} before the relists)"),
        Duration::from_secs(10),
        || unchanged() >= want,
    )
    .await;
    shim.stop().await;
}
