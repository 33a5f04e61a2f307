use super::*;

const NOW: i64 = 1_000_000 * 1_000_000_000;
const SEC: i64 = 1_000_000_000;

fn probe(ty: api::ProbeType, result: api::ProbeResult) -> api::ProbeStatus {
    api::ProbeStatus {
        r#type: ty as i32,
        result: result as i32,
        last_probe_result: result as i32,
        last_probe_at_ns: NOW - 4 * SEC,
        probes_run: 7,
        consecutive_successes: 5,
        ..Default::default()
    }
}

/// A node: `default/web` healthy (liveness + readiness), `shop/cart` killed by its liveness
/// probe and not ready, `shop/bad` with an annotation error only.
fn node() -> api::StatusResponse {
    let failing = api::ProbeStatus {
        last_output: "HTTP probe failed with statuscode: 404".into(),
        consecutive_successes: 0,
        consecutive_failures: 3,
        on_hold: true,
        ..probe(api::ProbeType::Liveness, api::ProbeResult::Failure)
    };
    api::StatusResponse {
        pods: vec![
            api::PodStatus {
                pod_uid: "u-cart".into(),
                pod_name: "cart".into(),
                pod_namespace: "shop".into(),
                containers: vec![api::ContainerStatus {
                    name: "app".into(),
                    container_id: "c0ffee0123456789abcdef".into(),
                    started: true,
                    ready: false,
                    live: false,
                    probes: vec![failing],
                    kills: 2,
                    last_kill: Some(api::Kill {
                        container_id: "c0ffee0123456789abcdef".into(),
                        probe_type: api::ProbeType::Liveness as i32,
                        reason: "Container app failed liveness probe, will be restarted".into(),
                        output: "HTTP probe failed with statuscode: 404".into(),
                        grace_period_seconds: 30,
                        at_ns: NOW - 190 * SEC,
                        error: String::new(),
                    }),
                    ..Default::default()
                }],
                spec_errors: vec![],
            },
            api::PodStatus {
                pod_uid: "u-web".into(),
                pod_name: "web".into(),
                pod_namespace: "default".into(),
                containers: vec![api::ContainerStatus {
                    name: "web".into(),
                    container_id: "abc".into(),
                    started: true,
                    ready: true,
                    live: true,
                    probes: vec![
                        probe(api::ProbeType::Liveness, api::ProbeResult::Success),
                        probe(api::ProbeType::Readiness, api::ProbeResult::Success),
                    ],
                    ..Default::default()
                }],
                spec_errors: vec![],
            },
            api::PodStatus {
                pod_uid: "u-bad".into(),
                pod_name: "bad".into(),
                pod_namespace: "shop".into(),
                containers: vec![],
                spec_errors: vec![api::SpecError {
                    container: "app".into(),
                    field: "livenessProbe.successThreshold".into(),
                    message: "must be 1".into(),
                }],
            },
        ],
    }
}

/// The row of `table` whose cells start with `pod` and `container` and that contains `with`.
fn row<'a>(table: &'a str, starts: &str, with: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.starts_with(starts) && l.contains(with))
        .unwrap_or_else(|| panic!("no row {starts:?} with {with:?} in\n{table}"))
}

fn cells(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn a_summary_then_one_row_per_probe_sorted_by_namespace_and_name() {
    let t = render_table(&node(), NOW);
    let first = t.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        "3 pods, 2 containers, 3 probes: 1 container not ready, 1 container not live, 2 kills, \
         1 annotation error"
    );
    let header = row(&t, "POD", "CONTAINER");
    assert_eq!(
        cells(header),
        [
            "POD",
            "CONTAINER",
            "PROBE",
            "STARTED",
            "READY",
            "LIVE",
            "RESULT",
            "LAST PROBE",
            "IN A ROW",
            "KILLS",
            "OUTPUT"
        ]
    );
    assert_eq!(
        cells(row(&t, "default/web", "Readiness")),
        [
            "default/web",
            "web",
            "Readiness",
            "yes",
            "yes",
            "yes",
            "Success",
            "Success 4s ago",
            "5 successes",
            "0"
        ]
    );
    assert_eq!(
        cells(row(&t, "shop/cart", "Liveness")),
        [
            "shop/cart",
            "app",
            "Liveness",
            "yes",
            "NO",
            "NO",
            "Failure (on hold)",
            "Failure 4s ago",
            "3 failures",
            "2",
            "HTTP probe failed with statuscode: 404"
        ]
    );
    let web = t.find("default/web").unwrap_or(usize::MAX);
    let cart = t.find("shop/cart").unwrap_or(0);
    assert!(web < cart, "sorted by namespace then name:\n{t}");
}

#[test]
fn kills_and_annotation_errors_have_their_own_tables() {
    let t = render_table(&node(), NOW);
    assert_eq!(
        cells(row(&t, "shop/cart", "3m10s ago")),
        [
            "shop/cart",
            "app",
            "2",
            "Liveness 3m10s ago",
            "30s",
            "c0ffee0123456",
            "stopped",
            "HTTP probe failed with statuscode: 404"
        ]
    );
    assert!(t.contains("CONTAINER ID"), "{t}");
    assert_eq!(
        cells(row(&t, "shop/bad", "must be")),
        [
            "shop/bad",
            "app",
            "livenessProbe.successThreshold",
            "must be 1"
        ]
    );
    let mut failed = node();
    if let Some(k) = failed.pods[0].containers[0].last_kill.as_mut() {
        k.error = "rpc error: context deadline exceeded".into();
    }
    let t = render_table(&failed, NOW);
    assert!(
        row(&t, "shop/cart", "3m10s ago").contains("FAILED: rpc error: context deadline exceeded"),
        "{t}"
    );
}

#[test]
fn verdicts_say_on_hold_done_and_never() {
    let mut startup = probe(api::ProbeType::Startup, api::ProbeResult::Success);
    startup.on_hold = true;
    assert_eq!(verdict(&startup), "Success (done)");
    startup.result = api::ProbeResult::Failure as i32;
    assert_eq!(verdict(&startup), "Failure (on hold)");
    let mut fresh = probe(api::ProbeType::Readiness, api::ProbeResult::Failure);
    fresh.probes_run = 0;
    fresh.consecutive_successes = 0;
    assert_eq!(verdict(&fresh), "Failure");
    assert_eq!(last_probe(&fresh, NOW), "never");
    assert_eq!(in_a_row(&fresh), "-");
    fresh.consecutive_failures = 1;
    assert_eq!(in_a_row(&fresh), "1 failure");
}

#[test]
fn ages_read_like_kubectls() {
    assert_eq!(age(0), "0s");
    assert_eq!(age(59 * SEC + SEC / 2), "59s");
    assert_eq!(age(190 * SEC), "3m10s");
    assert_eq!(age((2 * 3600 + 5 * 60) * SEC), "2h5m");
    assert_eq!(age((3 * 86400 + 4 * 3600) * SEC), "3d4h");
    assert_eq!(
        age(-5 * SEC),
        "0s",
        "a clock step never shows a negative age"
    );
}

#[test]
fn hostile_output_cannot_reach_the_terminal_and_long_output_is_cut() {
    let mut status = node();
    let evil = "\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nline two\t\u{202e}txt.exe";
    status.pods[1].containers[0].probes[0].last_output = evil.into();
    status.pods[1].containers[0].name = "we\u{1b}[31mb".into();
    let t = render_table(&status, NOW);
    for bad in ['\u{1b}', '\u{7}', '\r', '\t', '\u{202e}'] {
        assert!(!t.contains(bad), "{bad:?} reached the table:\n{t}");
    }
    assert!(t.contains(r"\u{1b}]0;pwned\u{7}"), "{t}");
    assert!(t.contains(r"we\u{1b}[31mb"), "{t}");
    // One line per row: the output's newline is shown, not followed.
    assert_eq!(t.lines().filter(|l| l.contains("pwned")).count(), 1, "{t}");

    status.pods[1].containers[0].probes[0].last_output = "x".repeat(500);
    let t = render_table(&status, NOW);
    let shown = row(&t, "default/web", "Liveness");
    assert!(
        shown.ends_with(&format!("{}…", "x".repeat(OUTPUT_CHARS))),
        "{shown}"
    );
    assert!(
        t.ends_with("outputs cut at 60 characters (…); --json prints them whole\n"),
        "{t}"
    );
    assert!(
        !render_table(&node(), NOW).contains("outputs cut"),
        "no note when nothing was cut"
    );
}

#[test]
fn no_pods_says_so() {
    let t = render_table(&api::StatusResponse::default(), NOW);
    assert_eq!(
        t,
        "no probed pods: the prober follows no pod with a podward.io/probes annotation on this node\n"
    );
}

#[test]
fn all_well_says_so() {
    let mut status = node();
    status.pods.retain(|p| p.pod_name == "web");
    let t = render_table(&status, NOW);
    assert!(
        t.starts_with("1 pod, 1 container, 2 probes: all started, ready and live\n"),
        "{t}"
    );
}

#[test]
fn json_is_the_status_message_with_enums_by_name_and_outputs_whole() {
    let mut status = node();
    let long = "y".repeat(500);
    status.pods[1].containers[0].probes[0].last_output = long.clone();
    let v: Value = serde_json::from_str(&render_json(&status).expect("json")).expect("parse");
    let cart = &v["pods"][0]["containers"][0];
    assert_eq!(cart["probes"][0]["type"], "LIVENESS");
    assert_eq!(cart["probes"][0]["result"], "PROBE_RESULT_FAILURE");
    assert_eq!(
        cart["probes"][0]["last_probe_result"],
        "PROBE_RESULT_FAILURE"
    );
    assert_eq!(cart["probes"][0]["consecutive_failures"], 3);
    assert_eq!(cart["kills"], 2);
    assert_eq!(cart["last_kill"]["probe_type"], "LIVENESS");
    assert_eq!(cart["last_kill"]["grace_period_seconds"], 30);
    let web = &v["pods"][1]["containers"][0];
    assert_eq!(web["probes"][1]["type"], "READINESS");
    assert_eq!(web["probes"][0]["last_output"], long.as_str());
    assert!(web["last_kill"].is_null());
    assert_eq!(
        v["pods"][2]["spec_errors"][0]["field"],
        "livenessProbe.successThreshold"
    );
}
