//! The shim's side reader keeps up with header blocks of any length, on the real containerd.
//!
//! containerd's answer to an exec whose command is not found quotes argv[0] in `grpc-message`,
//! so a pod author who puts a long command in an exec probe makes containerd send a trailer
//! header block as long as that command, on kubelet's one long-lived runtime connection. The
//! reader must decode it (keeping HPACK in step) and go on observing that connection: a pod
//! created on it next reaches the index and a Watch subscriber within a second, without the
//! connection ever being given up (no relist needed).

#[path = "support/shim.rs"]
mod support;

use std::time::Duration;

use podward_api::cri;
use podward_api::shim::v1::{SandboxEventKind as SK, WatchRequest, watch_event};
use podward_e2e::{PodSpec, TestNode};
use support::{InProcShim, lifecycle, metric, one_connection};
use tokio::time::Instant;

#[tokio::test]
async fn a_pod_created_after_execs_with_long_commands_reaches_watch_on_the_same_connection() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let mut rt = one_connection(&shim.cri).await;

    // The exec target: a running container.
    let config = PodSpec::new("exec-target")
        .sandbox_config(&node)
        .expect("sandbox config");
    let sid = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let cid = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sid.clone(),
            config: Some(support::container_config()),
            sandbox_config: Some(config),
        })
        .await
        .expect("CreateContainer")
        .into_inner()
        .container_id;
    rt.start_container(cri::StartContainerRequest {
        container_id: cid.clone(),
    })
    .await
    .expect("StartContainer");

    let mut watch = lifecycle(&shim.control)
        .watch(WatchRequest { from_seq: 0 })
        .await
        .expect("watch")
        .into_inner();
    let first = watch.message().await.expect("rpc").expect("snapshot");
    assert!(
        matches!(first.event, Some(watch_event::Event::Snapshot(_))),
        "Watch starts with a snapshot"
    );

    // 65,400 bytes: the trailer block passes 64 KiB ('X' is 8 bits in HPACK's Huffman code, so
    // containerd's encoder sends the message as it is). 130 KB and 1 MB: past any fixed buffer a
    // reader might choose (130 KB is just under Linux's 128 KiB limit for one argument); asserted
    // only as far as containerd, asked directly, answers them.
    let mut direct = one_connection(&node.containerd_socket()).await;
    let mut long_trailers = 0;
    for (round, len) in [65_400usize, 130_000, 1_000_000].into_iter().enumerate() {
        let name = "X".repeat(len);
        let exec_req = || {
            let mut req = tonic::Request::new(cri::ExecSyncRequest {
                container_id: cid.clone(),
                cmd: vec![name.clone()],
                timeout: 10,
            });
            req.set_timeout(Duration::from_secs(15));
            req
        };
        if len > 65_400 {
            match direct.exec_sync(exec_req()).await {
                Err(s) if s.message().contains(&name) => {}
                other => {
                    eprintln!(
                        "containerd does not answer an exec of a {len}-byte command with it: {:?}",
                        other.map(|_| ()).map_err(|s| (s.code(), s.message().len()))
                    );
                    continue;
                }
            }
        }
        let exec = rt.exec_sync(exec_req()).await;
        let quoted = match &exec {
            Err(s) => s.message().contains(&name),
            Ok(r) => String::from_utf8_lossy(&r.get_ref().stderr).contains(&name),
        };
        eprintln!(
            "argv[0] of {len} bytes: {} (grpc-message quotes it: {quoted})",
            match &exec {
                Ok(r) => format!("answered, exit code {}", r.get_ref().exit_code),
                Err(s) => format!("{:?}, message of {} bytes", s.code(), s.message().len()),
            }
        );
        if len == 65_400 {
            assert!(
                exec.as_ref().is_err_and(|_| quoted),
                "containerd quotes the command in grpc-message: {exec:?}",
            );
        }
        if exec.is_err() && quoted {
            long_trailers += 1;
        }

        // The next pod on the same connection, as kubelet's next call after its probe.
        let spec = PodSpec::new(&format!("after-long-exec-{round}"));
        let ran = Instant::now();
        let new_sid = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(spec.sandbox_config(&node).expect("sandbox config")),
                runtime_handler: String::new(),
            })
            .await
            .expect("RunPodSandbox after the exec")
            .into_inner()
            .pod_sandbox_id;
        eprintln!("pod {round} created on the same connection");
        let created = tokio::time::timeout(Duration::from_secs(1), async {
            loop {
                let ev = watch.message().await.expect("rpc").expect("stream open");
                if let Some(watch_event::Event::Sandbox(s)) = ev.event
                    && s.kind == SK::SandboxEventCreated as i32
                    && s.sandbox.is_some_and(|sb| sb.id == new_sid)
                {
                    return;
                }
            }
        })
        .await;
        assert!(
            created.is_ok(),
            "the pod created after an exec with a {len}-byte command did not reach Watch \
             within 1 s (after {:?})",
            ran.elapsed()
        );
        let snap = support::snapshot(&shim.control).await;
        assert!(
            snap.sandboxes.iter().any(|s| s.id == new_sid),
            "in the index"
        );
    }
    assert!(long_trailers >= 1);

    // Seen by the reader itself: the connection was never given up, nothing had to be relisted.
    let text = shim.metrics_text();
    assert_eq!(
        metric(&text, "podward_shim_observe_errors_total"),
        0.0,
        "{text}"
    );
    shim.stop().await;
}
