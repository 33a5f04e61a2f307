//! Errored probes are discarded (A8) but never invisible: `Status.last_error`, a count, and
//! `podward_prober_probe_errors_total`.

use super::harness::*;
use crate::spec::ProbeType;

fn probe_status(n: &Node) -> podward_api::prober::v1::ProbeStatus {
    n.manager.view().status(Some("u")).pods[0].containers[0].probes[0].clone()
}

#[tokio::test(start_paused = true)]
async fn an_errored_probe_shows_its_error_in_status_and_is_counted_until_a_probe_answers() {
    let n = Node::steady().await;
    let spec = r#"{"c":{"readinessProbe":{"httpGet":{"port":"http"},"periodSeconds":1}}}"#;
    n.script.set("c", ProbeType::Readiness, errored(), MS);
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    run_for(3 * S + 500 * MS).await;
    let p = probe_status(&n);
    assert_eq!(
        p.last_error,
        "strconv.Atoi: parsing \"http\": invalid syntax"
    );
    assert!(p.last_error_at_ns > 0);
    assert!(p.probes_errored >= 3, "{p:?}");
    assert_eq!(p.probes_run, 0, "errored probes are not results");
    assert_eq!(p.last_output, "");
    let counted = n
        .manager
        .metrics()
        .probe_errors
        .with_label_values(&["Readiness"])
        .get();
    assert_eq!(counted, p.probes_errored);
    // An answer clears the error; the count stays.
    n.script.set("c", ProbeType::Readiness, success(), MS);
    run_for(2 * S).await;
    let p = probe_status(&n);
    assert_eq!(p.last_error, "");
    assert!(p.probes_errored >= 3);
    assert!(p.probes_run >= 1);
}
