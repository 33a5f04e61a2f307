//! The housekeeper's last pass: which sources it read, and its plan (each action and finding
//! with its reason), the orphan's marked as such.

use std::fmt::Write as _;

use podward_api::housekeeper::v1::housekeeper_client::HousekeeperClient;
use podward_api::housekeeper::v1::{ActionKind, FindingKind, Outcome, Plan, StatusRequest};
use tonic::transport::Channel;

use crate::scenario::Orphan;
use crate::term::{Style, printable};

/// The last completed pass, if there was one and the housekeeper answered.
pub(crate) async fn last_pass(hk: &mut HousekeeperClient<Channel>) -> Option<Plan> {
    hk.status(StatusRequest {})
        .await
        .ok()
        .and_then(|r| r.into_inner().last_pass)
}

fn action_words(kind: ActionKind) -> &'static str {
    match kind {
        ActionKind::RemoveCgroup => "remove pod cgroup",
        ActionKind::ReduceCpu => "reduce the CPU of pod cgroup",
        ActionKind::RemovePodDir => "remove pod dir",
        ActionKind::RemoveSandbox => "remove leaked sandbox",
        ActionKind::RemoveLogDir => "remove log dir",
        ActionKind::RemoveContainer => "remove exited container",
        ActionKind::Unspecified => "act on",
    }
}

fn finding_words(kind: FindingKind) -> &'static str {
    match kind {
        FindingKind::Blocked => "blocked",
        FindingKind::Waiting => "waiting",
        FindingKind::Reported => "reported",
        FindingKind::Backoff => "backing off",
        FindingKind::Foreign => "foreign",
        FindingKind::Unspecified => "found",
    }
}

fn whose(uid: &str, orphan: &Orphan) -> String {
    if uid == orphan.uid {
        "the orphan old-job".to_owned()
    } else if uid.is_empty() {
        String::new()
    } else {
        format!("pod {}", uid.get(..8).unwrap_or(uid))
    }
}

/// `text` made printable, with the orphan's UID (shown in full when the demo left it) cut to
/// its first eight characters, so that a plan line fits a terminal line or two.
fn shown(text: &str, orphan: &Orphan, max: usize) -> String {
    let short = format!("{}…", orphan.uid.get(..8).unwrap_or(&orphan.uid));
    printable(&text.replace(&orphan.uid, &short), max)
}

/// The plan of `pass`, one line per action or finding (with its reason), plus one line for a
/// source that failed.
pub(crate) fn plan_lines(pass: &Plan, orphan: &Orphan, style: &Style) -> Vec<String> {
    let mut out = Vec::new();
    for s in pass.sources.iter().filter(|s| !s.ok) {
        out.push(style.red(&format!(
            "source {} failed{}: {}",
            s.name,
            if s.optional { " (optional)" } else { "" },
            printable(&s.error, 200)
        )));
    }
    for a in &pass.actions {
        let verb = match (a.outcome(), pass.dry_run) {
            (Outcome::Done, _) => style.green(&format!("done: {}", action_words(a.kind()))),
            (Outcome::Failed, _) => style.red(&format!(
                "FAILED: {} ({})",
                action_words(a.kind()),
                printable(&a.error, 80)
            )),
            (_, true) => style.yellow(&format!("would {}", action_words(a.kind()))),
            (_, false) => style.yellow(&format!("will {}", action_words(a.kind()))),
        };
        out.push(format!(
            "{verb} of {}: {} — {}",
            whose(&a.pod_uid, orphan),
            shown(&a.target, orphan, 120),
            shown(&a.reason, orphan, 160)
        ));
    }
    for f in &pass.findings {
        out.push(format!(
            "finding [{}] {} {}: {} — {}",
            finding_words(f.kind()),
            printable(&f.category, 20),
            whose(&f.pod_uid, orphan),
            shown(&f.target, orphan, 120),
            shown(&f.reason, orphan, 160)
        ));
    }
    out
}

/// The housekeeper section of the status block.
pub(crate) async fn describe(
    b: &mut String,
    hk: &mut HousekeeperClient<Channel>,
    orphan: &Orphan,
    style: &Style,
) {
    let Some(pass) = last_pass(hk).await else {
        let _ = writeln!(b, "  Housekeeper: no pass yet");
        return;
    };
    let sources: Vec<String> = pass
        .sources
        .iter()
        .map(|s| {
            if s.ok {
                format!("{} {}", s.name, s.items)
            } else {
                style.red(&format!("{} FAILED", s.name))
            }
        })
        .collect();
    let driver = pass
        .cgroup_driver
        .as_ref()
        .map(|d| {
            format!(
                "{} ({}, found by {})",
                d.driver, d.cgroup_version, d.found_by
            )
        })
        .unwrap_or_default();
    let _ = writeln!(
        b,
        "  Housekeeper (pass {}, {}): read {}; cgroup driver {driver}",
        pass.pass,
        if pass.dry_run { "dry run" } else { "acting" },
        sources.join(", "),
    );
    let lines = plan_lines(&pass, orphan, style);
    if lines.is_empty() {
        let _ = writeln!(b, "    plan: nothing to do");
    }
    for l in lines {
        let _ = writeln!(b, "    {l}");
    }
}
