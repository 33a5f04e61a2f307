//! Upstream readiness, startup, grace-override and termination scenarios (#1, #2, #10, #14–#19,
//! #22, #23 of upstream's `test/e2e/common/node/container_probe.go`, numbered in
//! `docs/prober.md`) on a real containerd, shim and prober,
//! with upstream's probe parameters, run concurrently on one node. "Never ready / never
//! restarted" windows are 60 s instead of 1–4 min: still several periods past the initial delay.

#[path = "support/prober.rs"]
mod support;

use std::time::Duration;

use podward_api::prober::v1 as api;
use podward_api::test_util::eventually;
use podward_e2e::{PodSpec, free_port};
use serde_json::json;
use support::*;
use tokio::time::Instant;

const NEVER: Duration = Duration::from_secs(60);
const ONCE: Duration = Duration::from_secs(120);

fn probe(c: &api::ContainerStatus, ty: api::ProbeType) -> Option<&api::ProbeStatus> {
    c.probes.iter().find(|p| p.r#type == ty as i32)
}

/// The container's start time as containerd reports it (Unix ns).
async fn started_at_ns(e: &Env, id: &str) -> Result<i64, String> {
    let mut rt = e.node.runtime_client().await;
    let st = rt
        .container_status(podward_api::cri::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        })
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    st.status
        .map(|s| s.started_at)
        .ok_or_else(|| "no container status".to_owned())
}

/// Never ready (and never restarted) for `window`.
async fn never_ready(e: &Env, pod: &podward_e2e::Pod, window: Duration) -> Result<(), String> {
    let end = Instant::now() + window;
    while Instant::now() < end {
        if e.container(pod.uid(), "app").await.is_some_and(|c| c.ready) {
            return Err("became ready".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (pod.restart_count("app") == 0)
        .then_some(())
        .ok_or("restarted".into())
}

/// Kill by a probe with probe-level grace 5 s while the pod's is 500 s and SIGTERM is ignored:
/// the Kill record says 5 and the container dies ~5 s after the kill.
async fn grace_override(
    e: &Env,
    name: &str,
    body: String,
    probes: serde_json::Value,
) -> Result<(), String> {
    let pod = e
        .run_spec(PodSpec::new(name).grace_period(500), name, &body, probes)
        .await;
    let deadline = Instant::now() + ONCE;
    let kill = loop {
        if let Some(k) = e
            .container(pod.uid(), "app")
            .await
            .and_then(|c| c.last_kill)
        {
            break k;
        }
        if Instant::now() > deadline {
            return Err("no kill".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if kill.grace_period_seconds != 5 || !kill.error.is_empty() {
        return Err(format!("kill {kill:?}"));
    }
    pod.wait_restart_count("app", 1, Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    // `at_ns` is when StopContainer was sent; the restart shows the container died.
    let took =
        Duration::from_nanos(u64::try_from(podward_api::time::now_ns() - kill.at_ns).unwrap_or(0));
    (took >= Duration::from_secs(4) && took <= Duration::from_secs(15))
        .then_some(())
        .ok_or(format!(
            "container died {took:?} after the kill was sent (grace 5 s, SIGTERM ignored)"
        ))
}

/// Pod deletion while readiness fails from the SIGTERM handler on: NotReady must be seen
/// before the pod is gone, and (with `liveness`) no liveness kill happens.
async fn terminating(e: &Env, name: &str, liveness: bool) -> Result<(), String> {
    let mut probes = json!({"readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 2, "failureThreshold": 1}});
    if liveness {
        probes["livenessProbe"] = json!({"exec": {"command": ["cat", "/tmp/liveness"]}, "periodSeconds": 1, "failureThreshold": 1});
    }
    let body = "echo ok > /tmp/ready; echo ok > /tmp/liveness; trap 'rm -f /tmp/ready /tmp/liveness; sleep 30' TERM; sleep 600 & wait";
    let pod = e.run(name, body, probes).await;
    let uid = pod.uid().to_owned();
    eventually(
        &format!("{name} ready"),
        Duration::from_secs(30),
        || async { e.container(&uid, "app").await.is_some_and(|c| c.ready) },
    )
    .await;
    let deleting = tokio::spawn(pod.delete());
    let deadline = Instant::now() + Duration::from_secs(25);
    let mut not_ready = false;
    while Instant::now() < deadline {
        match e.container(&uid, "app").await {
            Some(c) if c.kills > 0 => {
                return Err(format!("killed during termination: {:?}", c.last_kill));
            }
            Some(c) if !c.ready => {
                not_ready = true;
                break;
            }
            Some(_) => {}
            None => return Err("pod gone before it was seen NotReady".into()),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if !not_ready {
        return Err("still ready 25 s into termination".into());
    }
    // Liveness stays off until the pod is gone.
    while let Some(c) = e.container(&uid, "app").await {
        if c.kills > 0 || !c.live {
            return Err(format!("liveness acted during termination: {c:?}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        if deleting.is_finished() {
            break;
        }
    }
    deleting
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_startup_and_readiness_scenarios() {
    let env = Env::start().await;
    let e = &env;
    all(vec![
        ("#1 readiness never ready before initialDelay, no restart", Box::pin(async move {
            let port = free_port();
            let probes = json!({"readinessProbe": {"httpGet": {"path": "/", "port": port}, "initialDelaySeconds": 15}});
            let pod = e.run("ready-delay", &http_server(port, None), probes).await;
            eventually("ready-delay ready", Duration::from_secs(60), || async {
                e.container(pod.uid(), "app").await.is_some_and(|c| c.ready)
            })
            .await;
            let c = e.container(pod.uid(), "app").await.ok_or("no status")?;
            let ready_at = probe(&c, api::ProbeType::Readiness).ok_or("no readiness")?.last_transition_at_ns;
            let started_at = started_at_ns(e, &c.container_id).await?;
            if ready_at - started_at < 15_000_000_000 {
                return Err(format!("ready {} ms after start, before the 15 s initial delay", (ready_at - started_at) / 1_000_000));
            }
            (pod.restart_count("app") == 0).then_some(()).ok_or("restarted".into())
        })),
        ("#2 failing readiness never ready, no restart", Box::pin(async move {
            let port = free_port(); // nothing listens there
            let probes = json!({"readinessProbe": {"httpGet": {"path": "/", "port": port}, "initialDelaySeconds": 15}});
            let pod = e.run("ready-fail", &script("true"), probes).await;
            never_ready(e, &pod, NEVER).await
        })),
        ("#10 exec readiness timeout never ready", Box::pin(async move {
            let probes = json!({"readinessProbe": {"exec": {"command": ["/bin/sh", "-c", "sleep 10"]}, "timeoutSeconds": 1}});
            let pod = e.run("ready-timeout", &script("true"), probes).await;
            never_ready(e, &pod, NEVER).await
        })),
        ("#14 failing startup restarts", Box::pin(async move {
            let probes = json!({
                "livenessProbe": {"exec": {"command": ["/bin/true"]}, "initialDelaySeconds": 15, "failureThreshold": 1},
                "startupProbe": {"exec": {"command": ["/bin/false"]}, "initialDelaySeconds": 15, "failureThreshold": 3}});
            let pod = e.run("startup-fail", &script("true"), probes).await;
            restarts_once(&pod, ONCE).await
        })),
        ("#15 startup delays a failing liveness", Box::pin(async move {
            let probes = json!({
                "livenessProbe": {"exec": {"command": ["/bin/false"]}, "initialDelaySeconds": 15, "failureThreshold": 1},
                "startupProbe": {"exec": {"command": ["/bin/false"]}, "initialDelaySeconds": 15, "failureThreshold": 60}});
            let pod = e.run("startup-delays", &script("true"), probes).await;
            restarts_stay(&pod, 0, NEVER).await
        })),
        ("#16 liveness restarts after startup enables it", Box::pin(async move {
            let probes = json!({
                "livenessProbe": {"exec": {"command": ["/bin/false"]}, "initialDelaySeconds": 15, "failureThreshold": 1},
                "startupProbe": {"exec": {"command": ["cat", "/tmp/startup"]}, "initialDelaySeconds": 15, "failureThreshold": 60}});
            let pod = e.run("startup-enables", &script("sleep 10; echo ok > /tmp/startup"), probes).await;
            restarts_once(&pod, ONCE).await
        })),
        ("#17 ready right after startup succeeds (readiness period 30 s)", Box::pin(async move {
            let probes = json!({
                "readinessProbe": {"exec": {"command": ["cat", "/tmp/health"]}, "periodSeconds": 30},
                "startupProbe": {"exec": {"command": ["cat", "/tmp/startup"]}, "periodSeconds": 5, "failureThreshold": 120}});
            let pod = e.run("ready-after-startup", &script("echo ok > /tmp/health; sleep 32; echo ok > /tmp/startup"), probes).await;
            eventually("ready-after-startup ready", Duration::from_secs(90), || async {
                e.container(pod.uid(), "app").await.is_some_and(|c| c.ready)
            })
            .await;
            let c = e.container(pod.uid(), "app").await.ok_or("no status")?;
            let s = probe(&c, api::ProbeType::Startup).ok_or("no startup")?.last_transition_at_ns;
            let r = probe(&c, api::ProbeType::Readiness).ok_or("no readiness")?.last_transition_at_ns;
            let ready_in = Duration::from_nanos(u64::try_from(r - s).map_err(|_| format!("ready before startup succeeded: {r} < {s}"))?);
            (ready_in <= Duration::from_secs(25)).then_some(()).ok_or(format!("ready {ready_in:?} after startup"))
        })),
        ("#18 probe-level terminationGracePeriodSeconds on liveness", Box::pin(async move {
            let port = free_port();
            let body = http_server(port, Some(10)).replacen("trap 'exit 0' TERM", "trap '' TERM", 1);
            let probes = json!({"livenessProbe": {"httpGet": {"path": "/healthz", "port": port}, "initialDelaySeconds": 10, "failureThreshold": 1, "terminationGracePeriodSeconds": 5}});
            grace_override(e, "grace-liveness", body, probes).await
        })),
        ("#19 probe-level terminationGracePeriodSeconds on startup", Box::pin(async move {
            let body = "trap '' TERM; sleep 600 & wait".to_owned();
            let probes = json!({"startupProbe": {"exec": {"command": ["cat", "/tmp/startup"]}, "initialDelaySeconds": 10, "failureThreshold": 1, "terminationGracePeriodSeconds": 5}});
            grace_override(e, "grace-startup", body, probes).await
        })),
        ("#22 readiness goes false during termination", Box::pin(terminating(e, "term-ready", false))),
        ("#23 NotReady and no liveness kill during termination", Box::pin(terminating(e, "term-live", true))),
    ])
    .await;
}
