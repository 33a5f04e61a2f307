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

/// The log lines at WARN the worker writes, captured for the test's thread.
#[derive(Clone, Default)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Warnings {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Warnings {
    fn errored_lines(&self) -> usize {
        let text = String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned();
        text.lines()
            .filter(|l| l.contains("probe errored and resulted in unknown state"))
            .count()
    }
}

#[tokio::test(start_paused = true)]
async fn one_errored_probe_is_no_warning_and_a_second_in_a_row_is_one() {
    let warnings = Warnings::default();
    let writer = warnings.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    // Other tests' threads may have met the callsite first, with no subscriber of their own:
    // its cached interest ("never") would hide the line from this thread's subscriber.
    tracing::callsite::rebuild_interest_cache();

    let n = Node::steady().await;
    let spec = r#"{"c":{"readinessProbe":{"httpGet":{"port":"http"},"periodSeconds":1}}}"#;
    // One probe errors (an exec that met its container's end), then probes answer.
    n.script.set("c", ProbeType::Readiness, errored(), MS);
    n.manager
        .update_pod(pod("u", spec, vec![running(&n.clock, "c1", "c", 0, S)]));
    let deadline = tokio::time::Instant::now() + 5 * S;
    while probe_status(&n).probes_errored < 1 {
        assert!(tokio::time::Instant::now() < deadline, "no probe errored");
        run_for(10 * MS).await;
    }
    n.script.set("c", ProbeType::Readiness, success(), MS);
    run_for(2 * S).await;
    let p = probe_status(&n);
    assert_eq!(p.probes_errored, 1, "{p:?}");
    assert!(p.probes_run >= 1);
    assert_eq!(
        warnings.errored_lines(),
        0,
        "a single errored probe is not a warning"
    );

    // Errors that last: one warning, not one per probe.
    n.script.set("c", ProbeType::Readiness, errored(), MS);
    run_for(5 * S).await;
    assert!(probe_status(&n).probes_errored >= 4);
    assert_eq!(
        warnings.errored_lines(),
        1,
        "warned once for the same error"
    );
}
