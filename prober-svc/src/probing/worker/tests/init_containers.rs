//! Plain init containers and ephemeral containers are never probed (the API server refuses
//! probes on both in a pod spec), whichever came first: CRI's view of the pod or the API's.

use super::harness::*;
use crate::model::api_pod::{ContainerKind, RestartPolicy};
use crate::spec::ProbeType;

const ANN: &str = r#"{"setup":{"livenessProbe":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":1}},
    "debugger":{"livenessProbe":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":1}},
    "app":{"livenessProbe":{"exec":{"command":["true"]},"periodSeconds":1}}}"#;

fn kinds() -> Vec<(
    &'static str,
    ContainerKind,
    Option<crate::model::api_pod::Hook>,
)> {
    vec![
        ("setup", ContainerKind::Init, None),
        ("debugger", ContainerKind::Ephemeral, None),
        ("app", ContainerKind::Regular, None),
    ]
}

#[tokio::test(start_paused = true)]
async fn an_init_container_seen_from_cri_first_stops_being_probed_when_the_api_view_arrives() {
    let n = Node::steady().await;
    n.script.set("setup", ProbeType::Liveness, failure(), MS);
    n.script.set("debugger", ProbeType::Liveness, failure(), MS);
    let p = pod(
        "u",
        ANN,
        vec![
            running(&n.clock, "s1", "setup", 0, S),
            running(&n.clock, "d1", "debugger", 0, S),
        ],
    );
    // CRI first: nothing says yet what `setup` and `debugger` are.
    n.manager.update_pod(p.clone());
    // The API view arrives (same annotation) before a probe ran.
    n.manager
        .set_api_pod(api_pod(&p, RestartPolicy::Never, Some(ANN), kinds()));
    assert_eq!(
        n.manager.registry().worker_count(),
        1,
        "only app's liveness: the init and ephemeral containers' workers stopped"
    );
    run_for(5 * S).await;
    assert!(
        n.kills.done.lock().is_empty(),
        "never killed: {:?}",
        n.kills.done.lock()
    );
    let st = n.manager.view().status(Some("u"));
    let mut errs: Vec<&str> = st.pods[0]
        .spec_errors
        .iter()
        .map(|e| e.container.as_str())
        .collect();
    errs.sort_unstable();
    assert_eq!(errs, ["debugger", "setup"]);
}

#[tokio::test(start_paused = true)]
async fn with_the_api_view_first_they_are_never_probed() {
    let n = Node::steady().await;
    let p = pod("u", ANN, vec![running(&n.clock, "s1", "setup", 0, S)]);
    n.manager
        .set_api_pod(api_pod(&p, RestartPolicy::Never, Some(ANN), kinds()));
    n.manager.update_pod(p);
    assert_eq!(n.manager.registry().worker_count(), 1);
    run_for(3 * S).await;
    assert!(
        n.script
            .calls_of(ProbeType::Liveness)
            .iter()
            .all(|c| c.container_id != "s1")
    );
}
