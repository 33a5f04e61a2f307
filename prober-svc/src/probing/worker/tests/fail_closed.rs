//! A gated pod whose `podward.io/probes` annotation the API server would refuse (it does not
//! parse, a probe is invalid, a key is neither a probe field nor a container of the pod) fails
//! closed: its condition is `False` with reason `ProbeSpecInvalid` and a message naming the field
//! and the API server's text, whatever its valid probes say; a `Warning` event says the same and
//! `Status` and the spec-error gauge carry the error. An ungated pod with the same annotation
//! keeps probing the valid rest and is held by nothing.

use std::sync::Arc;

use super::gate_rules::support::{self, ApiServer, mock};
use serde_json::Value;

use super::harness::*;
use crate::kubernetes::gate::{Gate, KubeWriter};
use crate::kubernetes::metrics::ApiMetrics;
use crate::model::api_pod::{ContainerKind, RestartPolicy};
use crate::publish::event::EventKind;
use crate::spec::ProbeType;

const EXEC: &str = r#"{"exec":{"command":["true"]},"periodSeconds":1}"#;

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

/// The next condition write: (status, reason, message).
async fn next_write(api: &mut ApiServer) -> (String, String, String) {
    let w = api.next().await;
    assert_eq!(w.path, "/api/v1/namespaces/default/pods/pod-u/status");
    let c = &w.body["status"]["conditions"][0];
    let field = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    let got = (field("status"), field("reason"), field("message"));
    let mut pod = support::pod("pod-u", "u", "11", true, None);
    pod["metadata"]["namespace"] = Value::from("default");
    w.reply(200, pod);
    got
}

/// Each broken annotation (beside a valid readiness probe of container `c` that succeeds, where
/// the annotation parses) and the condition message it must give.
fn table() -> Vec<(String, &'static str)> {
    vec![
        (
            "{\"c\": {\"readinessProbe\": ".to_owned(),
            "podward.io/probes: invalid JSON: EOF while parsing a value at line 1 column 25",
        ),
        (
            "[]".to_owned(),
            "podward.io/probes: must be a JSON object keyed by container name, not an array",
        ),
        (
            r#"{"c":{"readinessProbe":{"exec":{"command":["true"]},"initialDelaySeconds":-1}}}"#
                .to_owned(),
            "podward.io/probes: container \"c\": readinessProbe.initialDelaySeconds: Invalid \
             value: -1: must be greater than or equal to 0",
        ),
        (
            format!(
                r#"{{"c":{{"readinessProbe":{EXEC},"livenessProbe":{{"exec":{{"command":["true"]}},"successThreshold":2}}}}}}"#
            ),
            "podward.io/probes: container \"c\": livenessProbe.successThreshold: Invalid value: 2: \
             must be 1",
        ),
        (
            format!(r#"{{"c":{{"readinesProbe":{EXEC}}}}}"#),
            "podward.io/probes: container \"c\": readinesProbe: unknown field \"readinesProbe\"",
        ),
        (
            r#"{"c":{"readinessProbe":{"exec":{"command":["true"]},"periodSecond":1}}}"#.to_owned(),
            "podward.io/probes: container \"c\": readinessProbe.periodSecond: unknown field \
             \"readinessProbe.periodSecond\"",
        ),
        (
            format!(r#"{{"c":{{"readinessProbe":{EXEC}}},"cc":{{"readinessProbe":{EXEC}}}}}"#),
            "podward.io/probes: container \"cc\": Not found: \"cc\": this pod has no container \
             of that name",
        ),
        (
            format!(r#"{{"c":{{"readinessProbe":{EXEC}}},"init":{{"readinessProbe":{EXEC}}}}}"#),
            "podward.io/probes: container \"init\": Forbidden: probes may not be set for init \
             containers without restartPolicy=Always",
        ),
    ]
}

#[tokio::test(start_paused = true)]
async fn each_broken_annotation_holds_a_gated_pod_false_with_its_message() {
    for (annotation, message) in table() {
        let (n, gate, mut api) = gated().await;
        n.script.set("c", ProbeType::Readiness, success(), MS);
        let p = pod("u", &annotation, vec![running(&n.clock, "c1", "c", 0, S)]);
        let v = api_pod(
            &p,
            RestartPolicy::Always,
            Some(&annotation),
            vec![
                ("c", ContainerKind::Regular, None),
                ("init", ContainerKind::Init, None),
            ],
        );
        n.manager.set_api_pod(v.clone());
        n.manager.update_pod(p.clone());
        gate.api_pod(&v);
        run_for(3 * S).await;
        gate.touch("u");
        assert_eq!(
            next_write(&mut api).await,
            ("False".into(), "ProbeSpecInvalid".into(), message.into()),
            "{annotation}"
        );
        let st = n.manager.view().status(Some("u"));
        assert!(
            !st.pods[0].spec_errors.is_empty(),
            "Status carries the error: {annotation}"
        );
        let gauge = n
            .metrics
            .spec_errors
            .with_label_values(&["pod-u", "default", "u"])
            .get();
        assert!(gauge >= 1.0, "the gauge counts it: {annotation}");
        let warned = n.seen.0.lock().iter().any(|e| {
            matches!(&e.kind, EventKind::AnnotationWarning { reason, message: m }
                if *reason == "ProbeSpecInvalid" && message.ends_with(m.as_str()))
        });
        assert!(warned, "a Warning ProbeSpecInvalid event: {annotation}");
        // Stable: nothing more is written while nothing changes.
        run_for(3 * S).await;
        gate.touch("u");
        api.quiet_for(3 * S).await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_ungated_pod_with_a_broken_key_probes_the_valid_rest() {
    let (n, gate, mut api) = gated().await;
    n.script.set("c", ProbeType::Readiness, success(), MS);
    let ann = format!(r#"{{"c":{{"readinessProbe":{EXEC},"livenesProbe":{EXEC}}}}}"#);
    let p = pod("u", &ann, vec![running(&n.clock, "c1", "c", 0, S)]);
    let mut v = api_pod(
        &p,
        RestartPolicy::Always,
        Some(&ann),
        vec![("c", ContainerKind::Regular, None)],
    );
    v.gated = false;
    n.manager.set_api_pod(v.clone());
    n.manager.update_pod(p.clone());
    gate.api_pod(&v);
    run_for(3 * S).await;
    assert!(
        !n.script.calls_of(ProbeType::Readiness).is_empty(),
        "the valid readiness probe runs"
    );
    assert!(n.kills.done.lock().is_empty(), "nothing is killed");
    let st = n.manager.view().status(Some("u"));
    assert_eq!(st.pods[0].spec_errors[0].field, "livenesProbe");
    gate.touch("u");
    api.quiet_for(3 * S).await;
}

#[tokio::test(start_paused = true)]
async fn fixing_the_annotation_makes_the_gated_pod_true() {
    let (n, gate, mut api) = gated().await;
    n.script.set("c", ProbeType::Readiness, success(), MS);
    let bad = format!(r#"{{"c":{{"readinessProbe":{EXEC},"timeoutSecond":1}}}}"#);
    let p = pod("u", &bad, vec![running(&n.clock, "c1", "c", 0, S)]);
    let cs = || vec![("c", ContainerKind::Regular, None)];
    let v = api_pod(&p, RestartPolicy::Always, Some(&bad), cs());
    n.manager.set_api_pod(v.clone());
    n.manager.update_pod(p.clone());
    gate.api_pod(&v);
    run_for(3 * S).await;
    gate.touch("u");
    assert_eq!(next_write(&mut api).await.1, "ProbeSpecInvalid");
    let good = format!(r#"{{"c":{{"readinessProbe":{EXEC}}}}}"#);
    let mut v = api_pod(&p, RestartPolicy::Always, Some(&good), cs());
    v.resource_version = "12".into();
    n.manager.set_api_pod(v.clone());
    gate.api_pod(&v);
    run_for(3 * S).await;
    gate.touch("u");
    assert_eq!(
        next_write(&mut api).await,
        ("True".into(), String::new(), String::new())
    );
}
