//! A broken `podward.io/probes` annotation on a real containerd, shim and prober, with the
//! prober's kube-rs client talking to the mock API server: a gated pod whose annotation does not
//! parse, has a probe the API server would refuse (`initialDelaySeconds: -1`, a 422 there), or
//! a key strict decoding refuses (`readinesProbe`) fails closed. What reaches the API is the
//! condition `False` with reason `ProbeSpecInvalid` and a message naming the field and the API
//! server's text, and a `Warning` `ProbeSpecInvalid` event; `podward-prober status` and the
//! `podward_prober_spec_errors` gauge carry the error. An ungated pod with a misspelled key
//! keeps its valid probes running and is killed by nothing, and no condition is written for it.

#[path = "support/prober.rs"]
mod support;

use std::time::Duration;

use podward_api::prober::v1 as api;
use podward_e2e::apiserver::{MockApiServer, pod_object};
use podward_e2e::{ContainerSpec, Pod, PodSpec};
use serde_json::{Value, json};
use support::*;
use tokio::time::Instant;

/// Puts a one-container pod `name` with `annotation` (raw text) into the mock API, gated or
/// not, and runs it on the node.
async fn run(env: &Env, mock: &MockApiServer, name: &str, annotation: &str, gated: bool) -> Pod {
    let spec = PodSpec::new(name)
        .annotation(podward_api::labels::PODWARD_PROBES, annotation)
        .container(ContainerSpec::new(
            "app",
            &["sh", "-c", &script("echo ok > /tmp/health")],
        ));
    let mut obj = pod_object(&spec, NODE);
    if gated {
        obj["spec"]["readinessGates"] = json!([{ "conditionType": GATE }]);
    }
    mock.put_pod(obj);
    env.driver
        .run_pod(&env.node, spec)
        .await
        .unwrap_or_else(|e| panic!("run pod {name}: {e}"))
}

/// The gate condition on pod `uid` at the mock, if any.
fn condition(mock: &MockApiServer, uid: &str) -> Option<Value> {
    mock.pod(uid)?["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == GATE)
        .cloned()
}

/// Event objects at the mock about pod `name` with `reason`.
fn events(mock: &MockApiServer, name: &str, reason: &str) -> Vec<Value> {
    mock.events()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .collect()
}

const EXEC_READY: &str = r#"{"exec":{"command":["cat","/tmp/health"]},"periodSeconds":1}"#;

/// A gated pod with `annotation` gets `False`/`ProbeSpecInvalid` with `message`, one Warning
/// event saying it, the error in `status` and in the gauge.
async fn fails_closed(
    env: &Env,
    mock: &MockApiServer,
    name: &'static str,
    annotation: String,
    message: &'static str,
) -> Result<(), String> {
    let pod = run(env, mock, name, &annotation, true).await;
    until("the gate condition", Duration::from_secs(20), || {
        condition(mock, pod.uid()).is_some()
    })
    .await?;
    let c = condition(mock, pod.uid()).unwrap_or_default();
    let got = (&c["status"], &c["reason"], &c["message"]);
    if got != (&json!("False"), &json!("ProbeSpecInvalid"), &json!(message)) {
        return Err(format!(
            "condition {c}, want False/ProbeSpecInvalid/{message}"
        ));
    }
    until("a ProbeSpecInvalid event", Duration::from_secs(20), || {
        !events(mock, name, "ProbeSpecInvalid").is_empty()
    })
    .await?;
    let ev = &events(mock, name, "ProbeSpecInvalid")[0];
    if ev["type"] != "Warning" || !message.ends_with(ev["message"].as_str().unwrap_or("?")) {
        return Err(format!("event {ev}"));
    }
    let st = env
        .status_cli(&["--pod", &format!("default/{name}")])
        .await?;
    if !st.ok
        || !st
            .stdout
            .contains(message.rsplit(": ").next().unwrap_or(message))
    {
        return Err(format!("status: {}{}", st.stdout, st.stderr));
    }
    let metrics = scrape(env.prober_admin).await?;
    let n = sample(
        &metrics,
        &["podward_prober_spec_errors", &format!("\"{name}\"")],
    );
    if n.unwrap_or(0.0) < 1.0 {
        return Err(format!("spec error gauge of {name}: {n:?}"));
    }
    Ok(())
}

/// An ungated pod with a misspelled probe key: its valid liveness probe runs, nothing is
/// killed, no condition is written.
async fn ungated_probes_the_rest(env: &Env, mock: &MockApiServer) -> Result<(), String> {
    let live =
        r#"{"exec":{"command":["cat","/tmp/health"]},"periodSeconds":1,"failureThreshold":1}"#;
    let ann = format!(r#"{{"app":{{"readinesProbe":{EXEC_READY},"livenessProbe":{live}}}}}"#);
    let pod = run(env, mock, "ungated", &ann, false).await;
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let c = env.container(pod.uid(), "app").await;
        if c.as_ref().is_some_and(|c| {
            c.probes
                .iter()
                .any(|p| p.r#type() == api::ProbeType::Liveness && p.consecutive_successes > 0)
        }) {
            break;
        }
        if Instant::now() >= end {
            return Err(format!("the valid liveness probe did not run: {c:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    restarts_stay(&pod, 0, Duration::from_secs(3)).await?;
    if condition(mock, pod.uid()).is_some() || !events(mock, "ungated", "Killing").is_empty() {
        return Err("a condition or a kill on an ungated pod".into());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pod_with_a_broken_annotation_fails_closed_at_the_mock_api_server() {
    let (mock, env, _dir) = start_with_api().await;
    let (e, m) = (&env, &mock);
    all(vec![
        (
            "annotation that does not parse",
            Box::pin(fails_closed(
                e,
                m,
                "unparsed",
                r#"{"app": {"readinessProbe": "#.to_owned(),
                "podward.io/probes: invalid JSON: EOF while parsing a value at line 1 column 27",
            )),
        ),
        (
            "initialDelaySeconds: -1",
            Box::pin(fails_closed(
                e,
                m,
                "negative",
                r#"{"app":{"readinessProbe":{"exec":{"command":["true"]},"initialDelaySeconds":-1}}}"#.to_owned(),
                "podward.io/probes: container \"app\": readinessProbe.initialDelaySeconds: \
                 Invalid value: -1: must be greater than or equal to 0",
            )),
        ),
        (
            "readinesProbe",
            Box::pin(fails_closed(
                e,
                m,
                "misspelled",
                format!(r#"{{"app":{{"readinesProbe":{EXEC_READY}}}}}"#),
                "podward.io/probes: container \"app\": readinesProbe: unknown field \
                 \"readinesProbe\"",
            )),
        ),
        (
            "ungated: the valid rest probed, nothing killed",
            Box::pin(ungated_probes_the_rest(e, m)),
        ),
    ])
    .await;
}
