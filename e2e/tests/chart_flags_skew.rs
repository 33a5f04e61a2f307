//! The chart's flags against the release before, in both directions
//! (`deploy/flags/previous-release.txt`, the N-1 release's recorded flags):
//! - every flag today's chart passes (default values and every option on) is one the N-1
//!   program accepts too: a chart upgraded before its image (a pinned `image.tag`, a node whose
//!   pod is not replaced yet) never crash-loops on an unknown flag;
//! - every flag the N-1 chart passed is one today's program accepts: a chart rolled back one
//!   release, with today's images, starts.
//!
//! A flag added in this release is fine in the binaries; the chart may pass it only from the
//! release after (when it is in the recorded N-1 list). Needs `python3` with `helm-sdkpy`, as
//! `chart_flags.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

#[path = "support/chart.rs"]
mod support;
use support::{Render, repo, strs};

/// `kind` ("binary" or "chart") → program → flags, from the recorded N-1 file.
fn recorded() -> BTreeMap<(String, String), BTreeSet<String>> {
    let text = std::fs::read_to_string(repo().join("deploy/flags/previous-release.txt"))
        .expect("deploy/flags/previous-release.txt");
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(w.len(), 3, "bad line {line:?}");
        out.entry((w[0].to_owned(), w[1].to_owned()))
            .or_default()
            .insert(w[2].to_owned());
    }
    out
}

/// The programs a container runs and the flags each is given: the binary's own flags, and after
/// a subcommand (`podward-prober ... sentinel ...`) that subcommand's, as `podward-prober-sentinel`
/// (the chart gives every flag's value after `=`, so a bare word is a subcommand).
fn program_flags(c: &Value) -> Vec<(String, BTreeSet<String>)> {
    let command = strs(&c["command"]);
    let program = match command.as_slice() {
        [_, script] if script.ends_with("install-shim.sh") => "install-shim.sh".to_owned(),
        [bin] => bin.rsplit('/').next().unwrap_or(bin).to_owned(),
        _ => return Vec::new(),
    };
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current = program.clone();
    for a in strs(&c["args"]) {
        if a.starts_with("--") {
            let flag = a.split('=').next().unwrap_or(&a).to_owned();
            out.entry(current.clone()).or_default().insert(flag);
        } else {
            current = format!("{program}-{a}");
        }
    }
    out.into_iter().collect()
}

/// Today's chart: program → flags, over the default values and every option on.
fn chart_now() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = chart_programs(None);
    for (p, f) in chart_programs(Some("charts/tests/values-all-on.yaml")) {
        out.entry(p).or_default().extend(f);
    }
    out
}

/// The chart rendered with `values` (or its defaults): program → flags.
fn chart_programs(values: Option<&str>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut r = Render::defaults();
    if let Some(v) = values {
        r = r.values(v);
    }
    for o in r.run().objects {
        if o["kind"] != "DaemonSet" && o["kind"] != "Deployment" {
            continue;
        }
        let spec = &o["spec"]["template"]["spec"];
        let mut all = spec["initContainers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        all.extend(spec["containers"].as_array().cloned().unwrap_or_default());
        for c in &all {
            for (p, f) in program_flags(c) {
                out.entry(p).or_default().extend(f);
            }
        }
    }
    out
}

/// The `--flags` today's `program` accepts (its `--help`).
fn accepted_now(program: &str) -> BTreeSet<String> {
    let out = match program {
        "install-shim.sh" => Command::new("sh")
            .arg(repo().join("deploy/install-shim.sh"))
            .arg("--help")
            .output(),
        p => {
            let (bin, sub) = p
                .strip_suffix("-sentinel")
                .map_or((p, None), |b| (b, Some("sentinel")));
            let mut cmd = Command::new(podward_e2e::bin_path(bin));
            cmd.args(sub).arg("--help");
            cmd.output()
        }
    }
    .unwrap_or_else(|e| panic!("{program} --help: {e}"));
    assert!(out.status.success(), "{program} --help failed");
    String::from_utf8_lossy(&out.stdout)
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|t| t.starts_with("--") && t.len() > 2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn today_s_chart_passes_only_flags_the_previous_release_accepts() {
    let n1 = recorded();
    let defaults = chart_programs(None);
    let mut missing = Vec::new();
    for (program, flags) in chart_now() {
        let Some(known) = n1.get(&("binary".to_owned(), program.clone())) else {
            // A component new in this release (the N-1 image has no such program at all) must be
            // one an operator turns on: the default values never render it, so an upgrade with
            // a pinned N-1 image runs nothing it cannot start.
            if !defaults.contains_key(&program) {
                continue;
            }
            panic!(
                "no recorded N-1 flags for {program}: record them in deploy/flags/previous-release.txt"
            );
        };
        missing.extend(flags.difference(known).map(|f| format!("{program} {f}")));
    }
    assert!(
        missing.is_empty(),
        "the chart passes flags the previous release does not know (it would crash-loop \
         under a pinned or not-yet-rolled image; pass them from the next release): {missing:?}"
    );
}

#[test]
fn the_previous_chart_s_flags_are_accepted_by_today_s_programs() {
    let mut missing = Vec::new();
    for ((kind, program), flags) in recorded() {
        if kind != "chart" {
            continue;
        }
        let now = accepted_now(&program);
        missing.extend(flags.difference(&now).map(|f| format!("{program} {f}")));
    }
    assert!(
        missing.is_empty(),
        "today's programs refuse flags the previous chart passes (a chart rolled back one \
         release would crash-loop): {missing:?}"
    );
}

#[test]
fn the_check_sees_a_flag_the_previous_release_lacks() {
    let c = serde_json::json!({
        "command": ["podward-prober"],
        "args": ["--node-name=a", "--flag-from-the-future=1", "sentinel", "--namespace=p"],
    });
    let programs = program_flags(&c);
    assert_eq!(programs.len(), 2, "{programs:?}");
    let (program, flags) = &programs[0];
    assert_eq!(program, "podward-prober");
    let known = &recorded()[&("binary".to_owned(), program.clone())];
    assert!(known.contains("--node-name"));
    assert!(!known.contains("--flag-from-the-future"));
    assert_eq!(flags.difference(known).count(), 1);
    assert_eq!(programs[1].0, "podward-prober-sentinel");
    assert!(programs[1].1.contains("--namespace"));
}
