//! Exec probe overhead: the prober's exec probe (podward's `Prober` → CRI `ExecSync`) against a
//! direct `ExecSync`, alternating on the same container of a real containerd.

use std::sync::Arc;
use std::time::{Duration, Instant};

use podward_api::cri::ExecSyncRequest;
use podward_e2e::{ContainerSpec, Driver, PodSpec, TestNode};
use podward_prober::handler::attempt::ProbeTarget;
use podward_prober::handler::exec::cri::CriExec;
use podward_prober::probe::{Prober, ProberOptions};
use podward_prober::runner::ProbeVerdict;
use podward_prober::spec::{ProbeType, parse_pod_probes};

/// Median and p90 of direct and prober exec times, in ms.
pub(crate) struct ExecNumbers {
    pub(crate) runs: usize,
    pub(crate) direct_p50_ms: f64,
    pub(crate) direct_p90_ms: f64,
    pub(crate) prober_p50_ms: f64,
    pub(crate) prober_p90_ms: f64,
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i]
}

pub(crate) async fn measure(runs: usize) -> Result<ExecNumbers, Box<dyn std::error::Error>> {
    let node = TestNode::start().await?;
    let driver = Driver::connect(&node.containerd_socket()).await?;
    let pod = driver
        .run_pod(
            &node,
            PodSpec::new("exec-bench").container(ContainerSpec::new("app", &["sleep", "3600"])),
        )
        .await?;
    let id = pod.container_id("app").ok_or("no container")?;
    let channel = podward_api::socket::channel(node.containerd_socket());
    let prober = Prober::new(
        ProberOptions {
            kube_version: "1.33".into(),
        },
        Arc::new(CriExec::new(channel.clone())),
    );
    let parsed = parse_pod_probes(
        r#"{"app":{"livenessProbe":{"exec":{"command":["true"]},"timeoutSeconds":5}}}"#,
    );
    let spec = parsed.containers["app"].liveness.clone().ok_or("spec")?;
    let mut client = podward_api::cri::runtime_service_client::RuntimeServiceClient::new(channel);
    let target = ProbeTarget {
        host_ip: "127.0.0.1".parse()?,
        container_id: &id,
        ports: &[],
        env: &[],
    };
    let (mut direct, mut via) = (Vec::new(), Vec::new());
    for i in 0..runs + 5 {
        let t = Instant::now();
        let r = client
            .exec_sync(ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["true".into()],
                timeout: 5,
            })
            .await?
            .into_inner();
        let d = t.elapsed();
        assert_eq!(r.exit_code, 0);
        let t = Instant::now();
        let v = prober.probe(ProbeType::Liveness, &spec, &target).await;
        let p = t.elapsed();
        assert!(matches!(v, ProbeVerdict::Result { .. }), "{v:?}");
        if i >= 5 {
            direct.push(d.as_secs_f64() * 1e3);
            via.push(p.as_secs_f64() * 1e3);
        }
    }
    pod.delete().await?;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {}).await;
    Ok(ExecNumbers {
        runs,
        direct_p50_ms: pct(&mut direct, 0.5),
        direct_p90_ms: pct(&mut direct, 0.9),
        prober_p50_ms: pct(&mut via, 0.5),
        prober_p90_ms: pct(&mut via, 0.9),
    })
}
