//! The prober and the Kubernetes API on a real containerd, shim and prober: the prober's kube-rs
//! client talks to a mock API server on loopback ([`podward_e2e::apiserver::MockApiServer`])
//! through a kubeconfig, and every assertion is about what reached that server:
//!
//! - a pod with the `podward.io/ready` readiness gate whose HTTP readiness starts failing gets
//!   exactly one condition write to `False` (with a reason) within period × failureThreshold +
//!   1 s, and exactly one back to `True` when it recovers;
//! - a liveness kill is `Unhealthy` × failureThreshold (one note) aggregated into one core `v1`
//!   event whose count is 3, and one `Killing`;
//! - a liveness kill of a container with an exec preStop hook runs the hook before the stop, and
//!   the stop's grace is what the hook left of the pod's grace;
//! - removing the annotation of a gated pod whose condition is False writes True (the gate's
//!   rules, docs/prober.md);
//! - a liveness probe in both the pod spec and the annotation: podward defers (no kill) and a
//!   `ProbeDeclaredTwice` Warning event reaches the API;
//! - the API being down stops neither probing nor kills, and the gate write waits for it;
//! - a prober restart (kill -9) changes nothing a Service sees, in either direction, and the new
//!   prober still writes when a result really changes.

#[path = "support/prober.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use podward_api::cri::ContainerStatusRequest;
use podward_e2e::apiserver::{MockApiServer, Recorded, pod_object};
use podward_e2e::{ContainerSpec, Pod, PodSpec, free_port};
use serde_json::{Value, json};
use support::*;
use tokio::time::Instant;

/// A host directory for pod `name`, bind-mounted at `/data` in its container.
fn data_dir(env: &Env, name: &str) -> PathBuf {
    let d = env.node.dir().join(format!("data-{name}"));
    std::fs::create_dir_all(&d).expect("data dir");
    d
}

/// Puts pod `spec` (container `app` running `script` with `probes`, `/data` from `data`) into
/// the mock API, with the readiness gate when `gated` and `pre_stop` as the container's hook,
/// then runs it on the node.
#[allow(clippy::too_many_arguments)]
async fn run(
    env: &Env,
    mock: &MockApiServer,
    spec: PodSpec,
    script: &str,
    probes: Value,
    data: &Path,
    gated: bool,
    pre_stop: Option<Value>,
) -> Pod {
    let name = spec.name.clone();
    let spec = spec
        .annotation(
            podward_api::labels::PODWARD_PROBES,
            &json!({ "app": probes }).to_string(),
        )
        .container(
            ContainerSpec::new("app", &["sh", "-c", script])
                .mount(data.to_str().expect("utf8"), "/data"),
        );
    let mut obj = pod_object(&spec, NODE);
    if gated {
        obj["spec"]["readinessGates"] = json!([{ "conditionType": GATE }]);
    }
    if let Some(h) = pre_stop {
        obj["spec"]["containers"][0]["lifecycle"] = json!({ "preStop": h });
    }
    mock.put_pod(obj);
    env.driver
        .run_pod(&env.node, spec)
        .await
        .unwrap_or_else(|e| panic!("run pod {name}: {e}"))
}

/// busybox httpd on 127.0.0.1:`port` serving `/data` (so `/healthz` is the host's
/// `data/healthz`).
fn readiness_server(port: u16) -> String {
    script(&format!("httpd -p 127.0.0.1:{port} -h /data"))
}

fn http_ready(port: u16) -> Value {
    json!({"readinessProbe": {"httpGet": {"path": "/healthz", "port": port},
        "periodSeconds": 1, "failureThreshold": 3, "timeoutSeconds": 1}})
}

/// Fails liveness in its first instance only (`/data/once` marks that one ran).
const FAIL_ONCE: &str =
    "if [ -f /data/once ]; then echo ok > /tmp/health; else touch /data/once; fi";

fn exec_live() -> Value {
    json!({"livenessProbe": {"exec": {"command": ["cat", "/tmp/health"]},
        "periodSeconds": 1, "failureThreshold": 3, "timeoutSeconds": 5}})
}

/// Successful-or-not writes of the gate condition to `status` for pod `name` after `since`.
fn gate_writes(mock: &MockApiServer, name: &str, status: &str, since: SystemTime) -> Vec<Recorded> {
    mock.status_writes(name)
        .into_iter()
        .filter(|r| r.at >= since && r.condition(GATE).is_some_and(|c| c["status"] == status))
        .collect()
}

/// Event objects at the mock about pod `name` with `reason`.
fn events(mock: &MockApiServer, name: &str, reason: &str) -> Vec<Value> {
    mock.events()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .collect()
}

/// An event's count (core `v1`, as kubelet's recorder writes it).
fn count(ev: &Value) -> u64 {
    ev["count"].as_u64().unwrap_or(0)
}

/// The gate follows HTTP readiness: one write to False within period × threshold + 1 s of the
/// first failure, one back to True; none while it stays either way.
async fn gate_follows_readiness(env: &Env, mock: &MockApiServer) -> Result<(), String> {
    let name = "gated";
    let data = data_dir(env, name);
    std::fs::write(data.join("healthz"), "ok").map_err(|e| e.to_string())?;
    let port = free_port();
    let pod = run(
        env,
        mock,
        PodSpec::new(name),
        &readiness_server(port),
        http_ready(port),
        &data,
        true,
        None,
    )
    .await;
    until("the gate to be True", Duration::from_secs(60), || {
        gate_status(mock, pod.uid()) == "True"
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = mock.status_writes(name).len();
    // Readiness starts failing now.
    let t0 = SystemTime::now();
    std::fs::remove_file(data.join("healthz")).map_err(|e| e.to_string())?;
    until(
        "a write of the gate to False",
        Duration::from_secs(15),
        || !gate_writes(mock, name, "False", t0).is_empty(),
    )
    .await?;
    let first = gate_writes(mock, name, "False", t0).remove(0);
    let took = first.at.duration_since(t0).unwrap_or_default();
    let bound = Duration::from_secs(3 + 1);
    if took > bound {
        return Err(format!(
            "False written {took:?} after readiness began failing (bound {bound:?})"
        ));
    }
    let reason = first
        .condition(GATE)
        .map(|c| c["reason"].clone())
        .unwrap_or_default();
    if reason.as_str().is_none_or(str::is_empty) {
        return Err(format!("the False write has no reason: {:?}", first.body));
    }
    eprintln!(
        "gate False written {took:?} after readiness began failing (bound {bound:?}), reason {reason}"
    );
    // It stays failing: no other write.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let writes = mock.status_writes(name);
    if writes.len() != before + 1 {
        return Err(format!(
            "{} writes while failing, want exactly one: {:?}",
            writes.len() - before,
            &writes[before..]
        ));
    }
    // It recovers.
    let t1 = SystemTime::now();
    std::fs::write(data.join("healthz"), "ok").map_err(|e| e.to_string())?;
    until(
        "a write of the gate back to True",
        Duration::from_secs(15),
        || !gate_writes(mock, name, "True", t1).is_empty(),
    )
    .await?;
    let took = gate_writes(mock, name, "True", t1)[0]
        .at
        .duration_since(t1)
        .unwrap_or_default();
    eprintln!("gate True written {took:?} after readiness recovered");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after: Vec<_> = mock
        .status_writes(name)
        .into_iter()
        .filter(|r| r.at >= t1)
        .collect();
    if after.len() != 1 || gate_status(mock, pod.uid()) != "True" {
        return Err(format!(
            "writes after recovery, want exactly one True: {after:?}"
        ));
    }
    Ok(())
}

/// The gate's rule for a removed annotation: a gated pod whose readiness fails (condition
/// False) loses its `podward.io/probes` annotation; the condition becomes True (no probe is
/// ready, as kubelet treats a container without a readiness probe; the gate is immutable).
async fn annotation_removed(env: &Env, mock: &MockApiServer) -> Result<(), String> {
    let name = "unannotated";
    let data = data_dir(env, name);
    let port = free_port();
    let pod = run(
        env,
        mock,
        PodSpec::new(name),
        &readiness_server(port),
        http_ready(port),
        &data,
        true,
        None,
    )
    .await;
    // No /data/healthz: readiness fails.
    until("the gate to be False", Duration::from_secs(30), || {
        gate_status(mock, pod.uid()) == "False"
    })
    .await?;
    let t = SystemTime::now();
    mock.modify_pod(pod.uid(), |p| {
        if let Some(a) = p["metadata"]["annotations"].as_object_mut() {
            a.remove(podward_api::labels::PODWARD_PROBES);
        }
    });
    until(
        "a write of the gate to True after the annotation went",
        Duration::from_secs(15),
        || !gate_writes(mock, name, "True", t).is_empty(),
    )
    .await?;
    if gate_status(mock, pod.uid()) != "True" {
        return Err(format!("gate is {}", gate_status(mock, pod.uid())));
    }
    Ok(())
}

/// A liveness probe declared both in the pod spec (kubelet's) and in the annotation: podward
/// defers (its own would be a second killer): a failing annotation liveness kills nothing, and a
/// `ProbeDeclaredTwice` Warning event reaches the API.
async fn declared_twice(env: &Env, mock: &MockApiServer) -> Result<(), String> {
    let name = "twice";
    let data = data_dir(env, name);
    let live = json!({"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1});
    let spec = PodSpec::new(name)
        .annotation(
            podward_api::labels::PODWARD_PROBES,
            &json!({"app": {"livenessProbe": live}}).to_string(),
        )
        .container(
            ContainerSpec::new("app", &["sh", "-c", &script("true")])
                .mount(data.to_str().expect("utf8"), "/data"),
        );
    let mut obj = pod_object(&spec, NODE);
    obj["spec"]["containers"][0]["livenessProbe"] = live;
    mock.put_pod(obj);
    let pod = env
        .driver
        .run_pod(&env.node, spec)
        .await
        .map_err(|e| e.to_string())?;
    until(
        "a ProbeDeclaredTwice Warning event",
        Duration::from_secs(20),
        || !events(mock, name, "ProbeDeclaredTwice").is_empty(),
    )
    .await?;
    // Several annotation periods: no kill, no Killing.
    let id = pod.container_id("app").ok_or("no container")?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let state = env
        .driver
        .client()
        .container_status(ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .map_err(|e| format!("ContainerStatus {id}: {e}"))?
        .into_inner()
        .status
        .map(|s| s.state)
        .unwrap_or_default();
    // CONTAINER_RUNNING = 1.
    if state != 1 || !events(mock, name, "Killing").is_empty() {
        return Err(format!(
            "podward killed the container (state {state}, Killing {:?})",
            events(mock, name, "Killing")
        ));
    }
    let ev = &events(mock, name, "ProbeDeclaredTwice")[0];
    if ev["type"] != "Warning" {
        return Err(format!("not a Warning: {ev}"));
    }
    Ok(())
}

/// A liveness kill: `Unhealthy` × 3 as one aggregated series, and one `Killing`.
async fn kill_events(env: &Env, mock: &MockApiServer) -> Result<(), String> {
    let name = "killed";
    let data = data_dir(env, name);
    let pod = run(
        env,
        mock,
        PodSpec::new(name).grace_period(2),
        &script(FAIL_ONCE),
        exec_live(),
        &data,
        false,
        None,
    )
    .await;
    pod.wait_restart_count("app", 1, Duration::from_secs(60))
        .await
        .map_err(|e| e.to_string())?;
    until(
        "Unhealthy × 3 and Killing at the API",
        Duration::from_secs(20),
        || {
            events(mock, name, "Unhealthy")
                .iter()
                .map(count)
                .sum::<u64>()
                >= 3
                && !events(mock, name, "Killing").is_empty()
        },
    )
    .await?;
    // The second instance is healthy: nothing more comes.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let unhealthy = events(mock, name, "Unhealthy");
    let killing = events(mock, name, "Killing");
    if unhealthy.len() != 1 || count(&unhealthy[0]) != 3 {
        return Err(format!("want one Unhealthy series of 3: {unhealthy:?}"));
    }
    if killing.len() != 1 || count(&killing[0]) != 1 {
        return Err(format!("want one Killing: {killing:?}"));
    }
    let ev_name = unhealthy[0]["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let reqs: Vec<String> = mock
        .requests()
        .into_iter()
        .filter(|r| {
            r.path.contains("/events")
                && (r.path.ends_with(&ev_name) || r.body["metadata"]["name"] == ev_name.as_str())
        })
        .map(|r| r.method)
        .collect();
    if reqs != ["POST", "PATCH", "PATCH"] {
        return Err(format!(
            "the Unhealthy series took {reqs:?}, want one POST and two PATCHes"
        ));
    }
    let note = unhealthy[0]["message"].as_str().unwrap_or("");
    if !note.starts_with("Liveness probe failed")
        || killing[0]["message"]
            .as_str()
            .is_none_or(|n| !n.contains("failed liveness probe"))
    {
        return Err(format!(
            "kubelet's messages: {note:?} / {:?}",
            killing[0]["message"]
        ));
    }
    eprintln!(
        "events: Unhealthy ×{} ({note}), Killing {:?}",
        count(&unhealthy[0]),
        killing[0]["message"]
    );
    Ok(())
}

/// Seconds since boot now (the clock `/proc/uptime` in the container shows too).
fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split(' ').next().and_then(|u| u.parse().ok()))
        .unwrap_or(0.0)
}

fn read_secs(p: &Path) -> Result<f64, String> {
    std::fs::read_to_string(p)
        .map_err(|e| format!("{}: {e}", p.display()))?
        .trim()
        .parse()
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// A liveness kill of a container with an exec preStop hook (3 s) and a pod grace of 6 s: the
/// hook runs first, SIGTERM comes after it, and SIGKILL (the container ignores SIGTERM) 6 s
/// after the hook began, not 6 s after it ended.
async fn prestop_before_stop(env: &Env, mock: &MockApiServer) -> Result<(), String> {
    let name = "hooked";
    let data = data_dir(env, name);
    let now = "cut -d' ' -f1 /proc/uptime";
    let script = format!(
        "trap \"{now} > /data/term\" TERM; {FAIL_ONCE}; while true; do sleep 600 & wait; done"
    );
    let hook = json!({"exec": {"command": ["sh", "-c",
        format!("{now} > /data/hook-start; sleep 3; {now} > /data/hook-end")]}});
    let pod = run(
        env,
        mock,
        PodSpec::new(name).grace_period(6),
        &script,
        exec_live(),
        &data,
        false,
        Some(hook),
    )
    .await;
    until("the first instance's id", Duration::from_secs(30), || {
        pod.container_id("app").is_some()
    })
    .await?;
    let first = pod.container_id("app").unwrap_or_default();
    pod.wait_restart_count("app", 1, Duration::from_secs(90))
        .await
        .map_err(|e| e.to_string())?;
    let st = env
        .driver
        .client()
        .container_status(ContainerStatusRequest {
            container_id: first.clone(),
            verbose: false,
        })
        .await
        .map_err(|e| format!("ContainerStatus {first}: {e}"))?
        .into_inner()
        .status
        .ok_or("no status")?;
    // The container's death on the uptime clock.
    let wall = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
    };
    let boot = wall(SystemTime::now()) - uptime();
    let died = st.finished_at as f64 / 1e9 - boot;
    let (start, end, term) = (
        read_secs(&data.join("hook-start"))?,
        read_secs(&data.join("hook-end"))?,
        read_secs(&data.join("term"))?,
    );
    let kill = env
        .container(pod.uid(), "app")
        .await
        .and_then(|c| c.last_kill)
        .ok_or("no kill in Status")?;
    eprintln!(
        "preStop: hook {:.2}s, SIGTERM {:.2}s after it began, death {:.2}s after it began; stop grace {}s",
        end - start,
        term - start,
        died - start,
        kill.grace_period_seconds
    );
    if !(start < end && end <= term + 0.05) {
        return Err(format!(
            "hook {start}..{end}, SIGTERM at {term}: the hook did not run before the stop"
        ));
    }
    if !(2..=3).contains(&kill.grace_period_seconds) {
        return Err(format!(
            "stop grace {}s, want 6 s less the 3 s hook",
            kill.grace_period_seconds
        ));
    }
    let total = died - start;
    if !(5.0..7.5).contains(&total) {
        return Err(format!(
            "died {total:.2}s after the hook began, want ~6 s (the pod's grace, hook included)"
        ));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_gate_events_prestop_and_api_down_at_the_mock_api_server() {
    let (mock, env, _dir) = start_with_api().await;
    let (e, m) = (&env, &mock);
    all(vec![
        (
            "gate: one False within period × threshold + 1 s, one True back",
            Box::pin(gate_follows_readiness(e, m)),
        ),
        (
            "liveness kill: Unhealthy × 3 aggregated, one Killing",
            Box::pin(kill_events(e, m)),
        ),
        (
            "annotation removed from a gated pod whose condition is False: True",
            Box::pin(annotation_removed(e, m)),
        ),
        (
            "liveness in the spec and the annotation: podward defers, a Warning event",
            Box::pin(declared_twice(e, m)),
        ),
        (
            "preStop exec hook before the stop, grace reduced by it",
            Box::pin(prestop_before_stop(e, m)),
        ),
    ])
    .await;

    // The API goes down: probing and kills go on; the gate write waits for it.
    mock.set_available(false);
    let down = SystemTime::now();
    let data = data_dir(e, "down");
    let pod = run(
        e,
        m,
        PodSpec::new("down").grace_period(2),
        &script(FAIL_ONCE),
        exec_live(),
        &data,
        false,
        None,
    )
    .await;
    pod.wait_restart_count("app", 1, Duration::from_secs(60))
        .await
        .expect("a liveness kill with the API down");
    let gated = data_dir(e, "gated");
    let uid = mock.pod_uid("default", "gated").expect("gated pod");
    std::fs::remove_file(gated.join("healthz")).expect("fail readiness");
    let ready = async || e.container(&uid, "app").await.is_some_and(|c| !c.ready);
    let end = Instant::now() + Duration::from_secs(15);
    while !ready().await {
        assert!(
            Instant::now() < end,
            "readiness not probed with the API down"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The write is tried (and refused) while the API stays down; the condition waits.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        mock.status_writes("gated").iter().any(|r| r.at >= down),
        "no condition write was tried while the API was down"
    );
    assert_eq!(
        gate_status(m, &uid),
        "True",
        "nothing written while the API is down"
    );
    let refused = mock.requests().iter().filter(|r| r.at >= down).count();
    mock.set_available(true);
    until(
        "the gate write once the API is back",
        Duration::from_secs(90),
        || gate_status(m, &uid) == "False",
    )
    .await
    .expect("gate written after the API came back");
    eprintln!(
        "API down: {refused} requests refused; kill and readiness went on; the gate written after"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prober_restart_changes_nothing_a_service_sees() {
    let (mock, mut env, _dir) = start_with_api().await;
    let (up, down) = (data_dir(&env, "up"), data_dir(&env, "down"));
    std::fs::write(up.join("healthz"), "ok").expect("healthz");
    let (p1, p2) = (free_port(), free_port());
    let up_pod = run(
        &env,
        &mock,
        PodSpec::new("up"),
        &readiness_server(p1),
        http_ready(p1),
        &up,
        true,
        None,
    )
    .await;
    let down_pod = run(
        &env,
        &mock,
        PodSpec::new("down"),
        &readiness_server(p2),
        http_ready(p2),
        &down,
        true,
        None,
    )
    .await;
    until("up True and down False", Duration::from_secs(60), || {
        gate_status(&mock, up_pod.uid()) == "True" && gate_status(&mock, down_pod.uid()) == "False"
    })
    .await
    .expect("conditions before the restart");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = mock.status_writes("up").len() + mock.status_writes("down").len();

    env.restart_prober_hard().await;
    let restarted = SystemTime::now();
    // The new prober has real results for both (several periods), and wrote nothing.
    let e = &env;
    let settled = async || {
        let (u, d) = (
            e.container(up_pod.uid(), "app").await,
            e.container(down_pod.uid(), "app").await,
        );
        u.is_some_and(|c| c.ready) && d.is_some()
    };
    let end = Instant::now() + Duration::from_secs(30);
    while !settled().await {
        assert!(Instant::now() < end, "the restarted prober never probed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = mock.status_writes("up").len() + mock.status_writes("down").len();
    assert_eq!(
        after,
        before,
        "the restart wrote conditions: {:?}",
        mock.requests()
            .into_iter()
            .filter(|r| r.at >= restarted && r.method == "PATCH")
            .collect::<Vec<_>>()
    );
    assert_eq!(
        gate_status(&mock, up_pod.uid()),
        "True",
        "True→False across the restart"
    );
    assert_eq!(
        gate_status(&mock, down_pod.uid()),
        "False",
        "False→True across the restart"
    );

    // A real change after the restart is written, once each way.
    let t = SystemTime::now();
    std::fs::write(down.join("healthz"), "ok").expect("healthz");
    std::fs::remove_file(up.join("healthz")).expect("rm healthz");
    until("both flipped", Duration::from_secs(15), || {
        gate_status(&mock, up_pod.uid()) == "False" && gate_status(&mock, down_pod.uid()) == "True"
    })
    .await
    .expect("writes after the restart");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(gate_writes(&mock, "up", "False", t).len(), 1);
    assert_eq!(gate_writes(&mock, "down", "True", t).len(), 1);
    assert_eq!(
        mock.status_writes("up").len() + mock.status_writes("down").len(),
        after + 2
    );
}
