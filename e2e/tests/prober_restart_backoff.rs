//! The restart delay after each podward liveness kill, with the driver backing off restarts as
//! kubelet does (`e2e/src/driver/backoff.rs`: client-go's `flowcontrol.Backoff`, 10 s
//! initial, 300 s cap, keyed per pod and container, consulted with the exited instance's
//! `finishedAt`), on a real containerd, shim and prober.
//!
//! A stop through CRI is an exit like any crash to kubelet, so the delay after the n-th kill in
//! a row is kubelet's crash-loop schedule: 0, 10, 20, 40, 80, 160 s for the 1st to 6th kill
//! (kubelet's own liveness kill restarts in the same sync instead). Walking that in real time
//! would take over five minutes, so the driver's back-off runs at [`SCALE`] (every duration ×
//! 0.05: 0, 0.5, 1, 2, 4, 8 s); the measured delays, divided back by the scale after the
//! driver's own restart latency is taken off, are the figures in docs/probes.md.

#[path = "support/prober.rs"]
mod support;

use std::time::Duration;

use podward_api::cri::ContainerStatusRequest;
use podward_e2e::PodSpec;
use serde_json::json;
use support::*;
use tokio::time::Instant;

/// The driver's back-off clock scale.
const SCALE: f64 = 0.05;
/// kubelet's schedule after the 1st … 6th kill in a row, seconds.
const KUBELET: [f64; 6] = [0.0, 10.0, 20.0, 40.0, 80.0, 160.0];
/// What the driver adds to a restart beyond the back-off (its 100 ms relist, CreateContainer,
/// StartContainer) at most, on these machines.
const SLACK: f64 = 1.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_delay_after_each_liveness_kill_follows_kubelets_crash_loop_backoff() {
    let env = Env::start().await;
    let live = json!({"livenessProbe": {"exec": {"command": ["cat", "/tmp/health"]},
        "periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 5}});
    let spec = PodSpec::new("backoff")
        .grace_period(2)
        .kubelet_backoff(SCALE);
    let pod = env.run_spec(spec, "backoff", &script("true"), live).await;
    let mut client = env.driver.client();
    let mut ids: Vec<String> = Vec::new();
    let mut delays: Vec<f64> = Vec::new();
    let end = Instant::now() + Duration::from_secs(55);
    while delays.len() < KUBELET.len() {
        assert!(
            Instant::now() < end,
            "only {} restarts: {delays:?}",
            delays.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        let Some(id) = pod.container_id("app") else {
            continue;
        };
        if ids.last() == Some(&id) {
            continue;
        }
        let Some(prev) = ids.last().cloned() else {
            ids.push(id);
            continue;
        };
        let mut status = async |id: &str| {
            client
                .container_status(ContainerStatusRequest {
                    container_id: id.to_owned(),
                    verbose: false,
                })
                .await
                .expect("ContainerStatus")
                .into_inner()
                .status
                .expect("status")
        };
        let finished = status(&prev).await.finished_at;
        let mut started = 0;
        while started == 0 {
            started = status(&id).await.started_at;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        delays.push((started - finished) as f64 / 1e9);
        ids.push(id);
    }
    let mut rows = Vec::new();
    for (k, (got, kubelet)) in delays.iter().zip(KUBELET).enumerate() {
        let want = kubelet * SCALE;
        rows.push(format!(
            "kill {}: restart after {got:.2} s (back-off {want:.2} s at scale {SCALE}; kubelet: {kubelet:.0} s)",
            k + 1
        ));
        assert!(
            *got >= want && *got < want + SLACK,
            "kill {}: restart after {got:.2} s, want {want:.2} s (+ at most {SLACK} s): {delays:?}",
            k + 1
        );
    }
    eprintln!("{}", rows.join("\n"));
}
