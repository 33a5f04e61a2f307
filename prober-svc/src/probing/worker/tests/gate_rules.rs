//! The readiness gate's rules (docs/prober.md, "The readiness gate", the table) with the real
//! manager behind the real gate writer, at the HTTP boundary (the `tower-test` mock API server
//! of `tests/support/apiserver.rs`): what the condition becomes when the annotation goes, when
//! the pod finishes, when a container of a `Never` pod exits.

#[path = "../../../../tests/support/apiserver.rs"]
pub(super) mod support;

use std::sync::Arc;

use serde_json::Value;
use support::{ApiServer, mock};

use super::harness::*;
use crate::kubernetes::gate::{Gate, KubeWriter};
use crate::kubernetes::metrics::ApiMetrics;
use crate::model::RunState;
use crate::model::api_pod::{
    ApiPod, ConditionStatus, ContainerKind, GateCondition, PodPhase, RestartPolicy,
};
use crate::spec::ProbeType;

const READY: &str = r#"{"c":{"readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1}}}"#;

/// A node's manager behind a gate writing to a mock API server.
async fn gated() -> (Node, Gate, ApiServer) {
    let n = Node::steady().await;
    let (client, api) = mock();
    let gate = Gate::new("podward.io/ready", ApiMetrics::new(None).expect("metrics"));
    tokio::spawn(gate.clone().run(
        Arc::new(KubeWriter::new(client)),
        Arc::new(n.manager.view().clone()),
        n.clock,
        std::future::pending(),
    ));
    (n, gate, api)
}

/// The reflector's order: the manager takes the view, then the gate.
fn reflect(n: &Node, gate: &Gate, view: &ApiPod) {
    n.manager.set_api_pod(view.clone());
    gate.api_pod(view);
}

/// The next condition write: (status, reason), answered with resource version `rv`.
async fn next_write(api: &mut ApiServer, rv: &str) -> (String, String) {
    let w = api.next().await;
    assert_eq!(w.method, "PATCH");
    assert_eq!(w.path, "/api/v1/namespaces/default/pods/pod-u/status");
    let c = &w.body["status"]["conditions"][0];
    let got = (
        c["status"].as_str().unwrap_or_default().to_owned(),
        c["reason"].as_str().unwrap_or_default().to_owned(),
    );
    let mut pod = support::pod("pod-u", "u", rv, true, None);
    pod["metadata"]["namespace"] = Value::from("default");
    w.reply(200, pod);
    got
}

fn view(p: &crate::model::PodInfo, policy: RestartPolicy, ann: Option<&str>, rv: &str) -> ApiPod {
    let mut v = api_pod(p, policy, ann, vec![("c", ContainerKind::Regular, None)]);
    v.resource_version = rv.into();
    v
}

fn cond(status: ConditionStatus, reason: &str) -> Option<GateCondition> {
    Some(GateCondition {
        status,
        reason: reason.into(),
        message: String::new(),
        last_transition_time: "2026-01-01T00:00:00Z".into(),
    })
}

#[tokio::test(start_paused = true)]
async fn removing_the_annotation_of_a_gated_pod_whose_condition_is_false_makes_it_true() {
    let (n, gate, mut api) = gated().await;
    n.script.set("c", ProbeType::Readiness, failure(), MS);
    let p = pod("u", READY, vec![running(&n.clock, "c1", "c", 0, S)]);
    let v = view(&p, RestartPolicy::Always, Some(READY), "10");
    n.manager.set_api_pod(v.clone());
    n.manager.update_pod(p.clone());
    gate.api_pod(&v);
    run_for(2 * S).await;
    gate.touch("u");
    assert_eq!(
        next_write(&mut api, "11").await,
        ("False".into(), "ReadinessProbeFailed".into())
    );
    // The annotation goes (the readiness gate cannot: it is immutable).
    let mut v = view(&p, RestartPolicy::Always, None, "12");
    v.condition = cond(ConditionStatus::False, "ReadinessProbeFailed");
    reflect(&n, &gate, &v);
    assert_eq!(
        next_write(&mut api, "13").await,
        ("True".into(), String::new()),
        "no probe is ready, as kubelet treats a container without a readiness probe"
    );
    api.quiet_for(3 * S).await;
}

#[tokio::test(start_paused = true)]
async fn a_finished_pod_is_false_with_kubelets_reason() {
    for (phase, reason) in [
        (PodPhase::Succeeded, "PodCompleted"),
        (PodPhase::Failed, "PodFailed"),
    ] {
        let (n, gate, mut api) = gated().await;
        n.script.set("c", ProbeType::Readiness, success(), MS);
        let p = pod("u", READY, vec![running(&n.clock, "c1", "c", 0, S)]);
        let v = view(&p, RestartPolicy::Never, Some(READY), "10");
        n.manager.set_api_pod(v.clone());
        n.manager.update_pod(p.clone());
        gate.api_pod(&v);
        run_for(2 * S).await;
        gate.touch("u");
        assert_eq!(
            next_write(&mut api, "11").await,
            ("True".into(), String::new())
        );
        let mut v = view(&p, RestartPolicy::Never, Some(READY), "12");
        v.phase = phase;
        v.condition = cond(ConditionStatus::True, "");
        reflect(&n, &gate, &v);
        assert_eq!(
            next_write(&mut api, "13").await,
            ("False".into(), reason.into()),
            "{phase:?}"
        );
        run_for(3 * S).await;
        gate.touch("u");
        api.quiet_for(3 * S).await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_exited_container_of_a_never_pod_is_not_ready_and_never_written_true() {
    let (n, gate, mut api) = gated().await;
    n.script.set("c", ProbeType::Readiness, success(), MS);
    let p = pod("u", READY, vec![running(&n.clock, "c1", "c", 0, S)]);
    let v = view(&p, RestartPolicy::Never, Some(READY), "10");
    n.manager.set_api_pod(v.clone());
    n.manager.update_pod(p.clone());
    gate.api_pod(&v);
    run_for(2 * S).await;
    gate.touch("u");
    assert_eq!(
        next_write(&mut api, "11").await,
        ("True".into(), String::new())
    );
    // The container exits; under Never it is not restarted and its worker ends.
    let mut c = running(&n.clock, "c1", "c", 0, S);
    c.state = RunState::Exited;
    n.manager.update_pod(pod("u", READY, vec![c]));
    run_for(3 * S).await;
    assert_eq!(
        n.manager.registry().worker_count(),
        0,
        "the worker ended, as kubelet's"
    );
    gate.touch("u");
    assert_eq!(
        next_write(&mut api, "12").await,
        ("False".into(), "ContainerNotRunning".into())
    );
    run_for(3 * S).await;
    gate.touch("u");
    api.quiet_for(3 * S).await;
}
