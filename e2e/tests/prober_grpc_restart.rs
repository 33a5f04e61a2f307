//! Upstream gRPC liveness scenarios (#20, #21) against a real `grpc.health.v1` server (Python
//! `grpcio-health-checking`, on the host: the pods are host-network, so the probe reaches it at
//! the node IP 127.0.0.1), and restart safety: a prober killed with SIGKILL mid-run comes back
//! from the shim's snapshot and restarts no healthy container.

#[path = "support/prober.rs"]
mod support;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use podward_api::test_util::eventually;
use podward_e2e::free_port;
use serde_json::json;
use support::*;
use tokio::time::Instant;

const HEALTH_SERVER: &str = r#"
import sys, grpc
from concurrent import futures
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
h = health.HealthServicer()
h.set("", health_pb2.HealthCheckResponse.SERVING)
health_pb2_grpc.add_HealthServicer_to_server(h, server)
server.add_insecure_port("127.0.0.1:" + sys.argv[1])
server.start()
print("ready", flush=True)
server.wait_for_termination()
"#;

/// The Python health server; killed on drop.
struct HealthServer(Child);

impl HealthServer {
    fn start(port: u16) -> HealthServer {
        let mut child = Command::new("python3")
            .args(["-c", HEALTH_SERVER, &port.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with grpcio-health-checking (pip install grpcio-health-checking)");
        let out = child.stdout.take().expect("stdout");
        let line = std::io::BufReader::new(out).lines().next();
        assert!(
            matches!(line, Some(Ok(ref l)) if l == "ready"),
            "health server did not start: {line:?}"
        );
        HealthServer(child)
    }
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_grpc_scenarios() {
    let env = Env::start().await;
    let e = &env;
    let port = free_port();
    let _server = HealthServer::start(port);
    all(vec![
        ("#20 gRPC liveness on a SERVING server never restarts", Box::pin(async move {
            let probes = json!({"livenessProbe": {"grpc": {"port": port}, "initialDelaySeconds": 15, "timeoutSeconds": 5, "failureThreshold": 1}});
            let pod = e.run("grpc-ok", &script("true"), probes).await;
            restarts_stay(&pod, 0, Duration::from_secs(60)).await?;
            let c = e.container(pod.uid(), "app").await.ok_or("no status")?;
            let p = c.probes.first().ok_or("no probe")?;
            (p.probes_run >= 3 && p.last_output == "service healthy")
                .then_some(())
                .ok_or(format!("probe status {p:?}"))
        })),
        ("#21 gRPC liveness on a wrong port restarts once", Box::pin(async move {
            let wrong = free_port(); // nothing listens there
            let probes = json!({"livenessProbe": {"grpc": {"port": wrong}, "initialDelaySeconds": 60, "timeoutSeconds": 5, "failureThreshold": 1}});
            let pod = e.run("grpc-wrong-port", &script("true"), probes).await;
            restarts_once(&pod, Duration::from_secs(150)).await
        })),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_prober_resumes_from_the_shim_and_restarts_no_healthy_container() {
    let mut env = Env::start().await;
    let port = free_port();
    // Aggressive liveness (period 1 s, FT 1) on healthy containers: any lost or confused state
    // after the restart would show up as a kill at once.
    let exec = json!({"livenessProbe": {"exec": {"command": ["cat", "/tmp/health"]}, "periodSeconds": 1, "failureThreshold": 1},
                      "readinessProbe": {"exec": {"command": ["cat", "/tmp/health"]}, "periodSeconds": 1}});
    let http = json!({"livenessProbe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 1, "failureThreshold": 1},
                      "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}});
    let a = env
        .run("healthy-exec", &script("echo ok > /tmp/health"), exec)
        .await;
    let b = env
        .run("healthy-http", &http_server(port, None), http)
        .await;
    let pods = [&a, &b];
    for p in pods {
        eventually("ready before the kill", Duration::from_secs(30), || async {
            env.container(p.uid(), "app").await.is_some_and(|c| c.ready)
        })
        .await;
    }
    // Past kubelet's 10 s restart grace, so the new prober treats them as pre-existing.
    tokio::time::sleep(Duration::from_secs(11)).await;
    for round in 0..2 {
        env.restart_prober_hard().await;
        for p in pods {
            let c = env.container(p.uid(), "app").await;
            assert!(
                c.as_ref().is_some_and(|c| c.ready && c.live),
                "round {round}: resumed ready at once: {c:?}"
            );
        }
        // Probes run again and nothing is killed.
        let end = Instant::now() + Duration::from_secs(15);
        while Instant::now() < end {
            for p in pods {
                assert_eq!(
                    p.restart_count("app"),
                    0,
                    "round {round}: a healthy container was restarted"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for p in pods {
            let c = env.container(p.uid(), "app").await.expect("status");
            assert_eq!(c.kills, 0);
            assert!(
                c.probes.iter().all(|p| p.probes_run >= 5),
                "round {round}: probes resumed: {c:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_shim_down_a_restarted_prober_reads_containerd_and_keeps_probing() {
    let mut env = Env::start().await;
    let probes = json!({"livenessProbe": {"exec": {"command": ["cat", "/tmp/health"]}, "periodSeconds": 1, "failureThreshold": 1},
                        "readinessProbe": {"exec": {"command": ["cat", "/tmp/health"]}, "periodSeconds": 1}});
    let pod = env
        .run("shimless", &script("echo ok > /tmp/health"), probes)
        .await;
    let uid = pod.uid().to_owned();
    let id = pod.container_id("app").expect("container id");
    eventually("ready", Duration::from_secs(30), || async {
        env.container(&uid, "app").await.is_some_and(|c| c.ready)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(11)).await;
    env.shim.kill9();
    env.restart_prober_hard().await;
    // The only source left is containerd's CRI, polled every 2 s.
    eventually(
        "pod seen through containerd",
        Duration::from_secs(30),
        || async {
            env.container(&uid, "app")
                .await
                .is_some_and(|c| c.container_id == id && c.ready)
        },
    )
    .await;
    let before = env.container(&uid, "app").await.expect("status");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = env.container(&uid, "app").await.expect("status");
    let runs = |c: &podward_api::prober::v1::ContainerStatus| {
        c.probes.iter().map(|p| p.probes_run).sum::<u64>()
    };
    assert!(
        runs(&after) > runs(&before),
        "probes keep running without the shim: {after:?}"
    );
    assert_eq!(after.kills, 0);
    // Still the same, running instance in containerd.
    let mut rt = env.node.runtime_client().await;
    let st = rt
        .container_status(podward_api::cri::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .expect("status")
        .into_inner()
        .status
        .expect("status");
    assert_eq!(
        st.state,
        podward_api::cri::ContainerState::ContainerRunning as i32
    );
}
