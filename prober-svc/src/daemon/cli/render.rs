//! What `podward-prober status` prints: a table for a person (docs/operations.md §9, "What the
//! prober sees"), or JSON for tools.
//!
//! Probe outputs, annotation errors and names reach the terminal, and outputs are whatever a
//! probed container answered: every cell is made printable first, so no output can move the
//! cursor, recolour or clear an operator's terminal.

use podward_api::daemon::table;
// Every cell goes through podward's one escaping place (`s`, cut after `max` characters, and
// whether it was cut).
use podward_api::outside_text::for_terminal_cut as printable;
use podward_api::prober::v1 as api;
use serde_json::Value;

/// Characters of a probe's (or a kill's) output shown in the table; `--json` has them whole.
const OUTPUT_CHARS: usize = 60;

/// Characters of a container ID shown (as `crictl ps` shows them, without a mark).
const ID_CHARS: usize = 13;

/// The status as `status --json` prints it: the `StatusResponse` message, with enum fields by
/// their proto names (`"LIVENESS"`, `"PROBE_RESULT_FAILURE"`) rather than wire numbers.
pub fn render_json(status: &api::StatusResponse) -> Result<String, serde_json::Error> {
    let mut v = serde_json::to_value(status)?;
    let type_name = |n| api::ProbeType::try_from(n).ok().map(|t| t.as_str_name());
    let result_name = |n| api::ProbeResult::try_from(n).ok().map(|r| r.as_str_name());
    for c in each(&mut v, "pods").flat_map(|p| each(p, "containers")) {
        for p in each(c, "probes") {
            name_enum(p, "type", &type_name);
            name_enum(p, "result", &result_name);
            name_enum(p, "last_probe_result", &result_name);
        }
        if let Some(kill) = c.get_mut("last_kill").filter(|k| k.is_object()) {
            name_enum(kill, "probe_type", &type_name);
        }
    }
    Ok(serde_json::to_string_pretty(&v)? + "\n")
}

/// The items of array `field` of `v` (none if it is not an array).
fn each<'a>(v: &'a mut Value, field: &str) -> impl Iterator<Item = &'a mut Value> {
    v.get_mut(field)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// Replaces the number in `item[field]` by its enum name, when it has one.
fn name_enum(item: &mut Value, field: &str, name: &dyn Fn(i32) -> Option<&'static str>) {
    let named = item
        .get(field)
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .and_then(name);
    if let Some(s) = named {
        item[field] = Value::from(s);
    }
}

/// The status as a person reads it, at `now_ns` (Unix ns; ages are relative to it): a summary
/// line, one row per probe, then the last kill of each container that had one, then the errors
/// in the pods' `podward.io/probes` annotations.
pub fn render_table(status: &api::StatusResponse, now_ns: i64) -> String {
    let mut pods: Vec<&api::PodStatus> = status.pods.iter().collect();
    pods.sort_by(|a, b| {
        (&a.pod_namespace, &a.pod_name, &a.pod_uid).cmp(&(
            &b.pod_namespace,
            &b.pod_name,
            &b.pod_uid,
        ))
    });
    let mut out = summary(&pods);
    let mut cut = false;
    let mut probes = Vec::new();
    let mut kills = Vec::new();
    let mut errors = Vec::new();
    for pod in &pods {
        let who = printable(
            &format!("{}/{}", pod.pod_namespace, pod.pod_name),
            usize::MAX,
        )
        .0;
        let mut containers: Vec<&api::ContainerStatus> = pod.containers.iter().collect();
        containers.sort_by(|a, b| a.name.cmp(&b.name));
        for c in containers {
            let name = printable(&c.name, usize::MAX).0;
            for p in &c.probes {
                let (row, was_cut) = probe_row(&who, &name, c, p, now_ns);
                cut |= was_cut;
                probes.push(row);
            }
            if let Some(k) = &c.last_kill {
                let (row, was_cut) = kill_row(&who, &name, c, k, now_ns);
                cut |= was_cut;
                kills.push(row);
            }
        }
        for e in &pod.spec_errors {
            errors.push(vec![
                who.clone(),
                printable(&e.container, usize::MAX).0,
                printable(&e.field, usize::MAX).0,
                printable(&e.message, usize::MAX).0,
            ]);
        }
    }
    section(&mut out, &PROBE_COLUMNS, &probes);
    section(&mut out, &KILL_COLUMNS, &kills);
    section(&mut out, &ERROR_COLUMNS, &errors);
    if cut {
        out.push_str(&format!(
            "\noutputs cut at {OUTPUT_CHARS} characters (…); --json prints them whole\n"
        ));
    }
    out
}

/// The probe table's columns, one per cell of [`probe_row`].
const PROBE_COLUMNS: [&str; 11] = [
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
    "OUTPUT",
];

/// The kill table's columns, one per cell of [`kill_row`].
const KILL_COLUMNS: [&str; 8] = [
    "POD",
    "CONTAINER",
    "KILLS",
    "LAST KILL",
    "GRACE",
    "CONTAINER ID",
    "STOP",
    "OUTPUT",
];

/// The annotation errors' columns.
const ERROR_COLUMNS: [&str; 4] = ["POD", "CONTAINER", "ANNOTATION FIELD", "ERROR"];

/// One row of the probe table, and whether its output was cut.
fn probe_row(
    who: &str,
    name: &str,
    c: &api::ContainerStatus,
    p: &api::ProbeStatus,
    now_ns: i64,
) -> (Vec<String>, bool) {
    let (output, was_cut) = printable(&p.last_output, OUTPUT_CHARS);
    // An ERROR column goes here, from `ProbeStatus.last_error`, once the Status API
    // carries why a probe errored (kubelet's "probe errored" case).
    (
        vec![
            who.to_owned(),
            name.to_owned(),
            type_name(p.r#type()).to_owned(),
            yes_no(c.started),
            yes_no(c.ready),
            yes_no(c.live),
            verdict(p),
            last_probe(p, now_ns),
            in_a_row(p),
            c.kills.to_string(),
            output,
        ],
        was_cut,
    )
}

/// One row of the kill table (a container's last kill), and whether its output was cut.
fn kill_row(
    who: &str,
    name: &str,
    c: &api::ContainerStatus,
    k: &api::Kill,
    now_ns: i64,
) -> (Vec<String>, bool) {
    let (output, was_cut) = printable(&k.output, OUTPUT_CHARS);
    (
        vec![
            who.to_owned(),
            name.to_owned(),
            c.kills.to_string(),
            format!(
                "{} {} ago",
                type_name(k.probe_type()),
                age(now_ns.saturating_sub(k.at_ns))
            ),
            format!("{}s", k.grace_period_seconds),
            printable(&k.container_id, usize::MAX)
                .0
                .chars()
                .take(ID_CHARS)
                .collect(),
            if k.error.is_empty() {
                "stopped".to_owned()
            } else {
                format!("FAILED: {}", printable(&k.error, usize::MAX).0)
            },
            output,
        ],
        was_cut,
    )
}

/// Appends `rows` under `header` after a blank line, unless there are none.
fn section(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    if !rows.is_empty() {
        out.push('\n');
        out.push_str(&table::render(header, rows));
    }
}

/// The first line: how much the prober follows, and what is wrong (counted per container, as
/// kubelet reports started/ready per container).
fn summary(pods: &[&api::PodStatus]) -> String {
    if pods.is_empty() {
        return "no probed pods: the prober follows no pod with a podward.io/probes annotation \
                on this node\n"
            .to_owned();
    }
    let containers: Vec<&api::ContainerStatus> =
        pods.iter().flat_map(|p| p.containers.iter()).collect();
    let count =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let probes: usize = containers.iter().map(|c| c.probes.len()).sum();
    let mut problems = Vec::new();
    for (n, what) in [
        (
            containers.iter().filter(|c| !c.started).count(),
            "not started",
        ),
        (containers.iter().filter(|c| !c.ready).count(), "not ready"),
        (containers.iter().filter(|c| !c.live).count(), "not live"),
    ] {
        if n > 0 {
            problems.push(format!("{} {what}", count(n, "container", "containers")));
        }
    }
    let kills: u64 = containers.iter().map(|c| u64::from(c.kills)).sum();
    if kills > 0 {
        problems.push(count(kills as usize, "kill", "kills"));
    }
    let errors: usize = pods.iter().map(|p| p.spec_errors.len()).sum();
    if errors > 0 {
        problems.push(count(errors, "annotation error", "annotation errors"));
    }
    let state = if problems.is_empty() {
        "all started, ready and live".to_owned()
    } else {
        problems.join(", ")
    };
    format!(
        "{}, {}, {}: {state}\n",
        count(pods.len(), "pod", "pods"),
        count(containers.len(), "container", "containers"),
        count(probes, "probe", "probes"),
    )
}

/// kubelet's name of a probe type (as in its events and metrics).
fn type_name(t: api::ProbeType) -> &'static str {
    match t {
        api::ProbeType::Liveness => "Liveness",
        api::ProbeType::Readiness => "Readiness",
        api::ProbeType::Startup => "Startup",
        api::ProbeType::Unspecified => "?",
    }
}

/// kubelet's name of a probe result.
fn result_name(r: api::ProbeResult) -> &'static str {
    match r {
        api::ProbeResult::Success => "Success",
        api::ProbeResult::Failure => "Failure",
        api::ProbeResult::Unknown => "Unknown",
    }
}

/// `yes`, or a `NO` that stands out in a column of yeses.
fn yes_no(b: bool) -> String {
    if b { "yes" } else { "NO" }.to_owned()
}

/// The probe's verdict (after thresholds); `(done)` once a startup probe succeeded, `(on hold)`
/// once liveness or startup failed at threshold: not probed again until the container restarts.
fn verdict(p: &api::ProbeStatus) -> String {
    let r = result_name(p.result());
    match (p.on_hold, p.r#type(), p.result()) {
        (true, api::ProbeType::Startup, api::ProbeResult::Success) => format!("{r} (done)"),
        (true, ..) => format!("{r} (on hold)"),
        (false, ..) => r.to_owned(),
    }
}

/// The last probe's own result and how long ago it ran.
fn last_probe(p: &api::ProbeStatus, now_ns: i64) -> String {
    if p.probes_run == 0 || p.last_probe_at_ns == 0 {
        return "never".to_owned();
    }
    format!(
        "{} {} ago",
        result_name(p.last_probe_result()),
        age(now_ns.saturating_sub(p.last_probe_at_ns))
    )
}

/// The run of equal results that thresholds count.
fn in_a_row(p: &api::ProbeStatus) -> String {
    match (p.consecutive_successes, p.consecutive_failures) {
        (_, f @ 1..) => format!("{f} {}", if f == 1 { "failure" } else { "failures" }),
        (s @ 1.., _) => format!("{s} {}", if s == 1 { "success" } else { "successes" }),
        _ => "-".to_owned(),
    }
}

/// A duration in nanoseconds as `kubectl get` shows ages: `45s`, `3m10s`, `2h5m`, `3d4h`.
fn age(ns: i64) -> String {
    let s = (ns.max(0) / 1_000_000_000) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests;
