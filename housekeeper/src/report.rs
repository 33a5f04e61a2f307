//! `podward-housekeeper plan`: fetch the plan (from the daemon, or computed in-process with
//! `--local`) and print it for an operator, as a table or as JSON.

use podward_api::daemon::table;
use podward_api::housekeeper::v1::housekeeper_client::HousekeeperClient;
use podward_api::housekeeper::v1::{ActionKind, FindingKind, Outcome, Plan, PlanRequest};
use podward_api::outside_text::for_terminal;

use crate::config::{Config, RootError, check_roots};
use crate::reconcile::Mode;

/// Why `plan` could not print a plan.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The daemon's socket did not answer.
    #[error("cannot reach the housekeeper at {path}: {source} (is it running? try --local)")]
    Connect {
        /// The socket.
        path: std::path::PathBuf,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The daemon answered with an error.
    #[error("Plan: {0}")]
    Rpc(#[from] tonic::Status),
    /// JSON encoding failed.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// `--local` with a root the housekeeper must not read as one.
    #[error(transparent)]
    Roots(#[from] RootError),
}

/// Gets the plan and renders it (`json` or a table). The daemon's plan says whether the daemon
/// will act on it; a `local` plan is never acted on (it is a dry run), and refuses the same roots
/// the daemon refuses.
pub async fn plan_command(config: &Config, json: bool, local: bool) -> Result<String, ReportError> {
    let plan = if local {
        check_roots(config)?;
        let mut plan = crate::run::node_reconciler(config)
            .pass(Mode::Preview)
            .await
            .0;
        plan.dry_run = true;
        plan.preview = true;
        plan
    } else {
        let channel = podward_api::socket::connect(config.socket.clone())
            .await
            .map_err(|source| ReportError::Connect {
                path: config.socket.clone(),
                source,
            })?;
        HousekeeperClient::new(channel)
            .plan(PlanRequest {})
            .await?
            .into_inner()
            .plan
            .unwrap_or_default()
    };
    render(&plan, json)
}

/// Renders a plan as `plan` prints it: JSON for tools, or the operator's table.
pub fn render(plan: &Plan, json: bool) -> Result<String, ReportError> {
    if json {
        Ok(serde_json::to_string_pretty(&plan_json(plan)?)? + "\n")
    } else {
        Ok(render_table(plan))
    }
}

/// The plan as JSON for an operator's tools: enum fields by their proto names
/// (`"REMOVE_CGROUP"`, `"DONE"`, `"BLOCKED"`), not the wire numbers serde derives on prost types.
fn plan_json(plan: &Plan) -> Result<serde_json::Value, serde_json::Error> {
    let mut v = serde_json::to_value(plan)?;
    let rename =
        |item: &mut serde_json::Value, field: &str, name: &dyn Fn(i32) -> Option<&'static str>| {
            if let Some(s) = item
                .get(field)
                .and_then(serde_json::Value::as_i64)
                .and_then(|n| i32::try_from(n).ok())
                .and_then(name)
            {
                item[field] = serde_json::Value::from(s);
            }
        };
    let kind = |n| ActionKind::try_from(n).ok().map(|k| k.as_str_name());
    let outcome = |n| Outcome::try_from(n).ok().map(|o| o.as_str_name());
    let finding = |n| FindingKind::try_from(n).ok().map(|k| k.as_str_name());
    if let Some(actions) = v
        .get_mut("actions")
        .and_then(serde_json::Value::as_array_mut)
    {
        for a in actions {
            rename(a, "kind", &kind);
            rename(a, "outcome", &outcome);
        }
    }
    if let Some(findings) = v
        .get_mut("findings")
        .and_then(serde_json::Value::as_array_mut)
    {
        for f in findings {
            rename(f, "kind", &finding);
        }
    }
    Ok(v)
}

/// The header's first words: the pass, and what the daemon does with the plan (a preview says
/// what the daemon's next pass will do).
fn pass_words(plan: &Plan) -> String {
    let n = plan.pass;
    match (plan.preview, plan.dry_run) {
        (true, true) => format!("next pass {n} (dry run: nothing will be changed)"),
        (true, false) => format!("next pass {n} (ACTS: the daemon will execute these actions)"),
        (false, true) => format!("pass {n} (dry run)"),
        (false, false) => format!("pass {n} (acted)"),
    }
}

/// The plan as text tables: a header (the pass, whether it acts, whether every source was read),
/// sources, actions (kind, pod uid, target, reason, evidence), findings. Targets, reasons and
/// errors carry names from pods' volumes and the node: every one is written through
/// [`for_terminal`] (the tables do it for their cells), so the text has no control character and
/// no line a name made.
pub fn render_table(plan: &Plan) -> String {
    let mut out = format!(
        "{}: sources {}\n",
        pass_words(plan),
        if plan.sources_ok {
            "ok"
        } else {
            "FAILED: nothing is planned"
        }
    );
    out.push_str(&driver_line(plan));
    for s in &plan.sources {
        let state = if s.ok {
            format!("ok, {} items", s.items)
        } else if s.optional {
            format!("unavailable (optional): {}", for_terminal(&s.error))
        } else {
            format!("FAILED: {}", for_terminal(&s.error))
        };
        out.push_str(&format!(
            "  {:<9} {:>9.1} ms  {state}\n",
            for_terminal(&s.name),
            s.duration_ns as f64 / 1e6
        ));
    }
    out.push('\n');
    if plan.actions.is_empty() {
        out.push_str("no actions\n");
    } else {
        let rows: Vec<Vec<String>> = plan
            .actions
            .iter()
            .map(|a| {
                let mut kind = a.kind().as_str_name().to_owned();
                match a.outcome() {
                    podward_api::housekeeper::v1::Outcome::Done => kind.push_str(" (done)"),
                    podward_api::housekeeper::v1::Outcome::Failed => {
                        kind.push_str(&format!(" (FAILED: {})", a.error))
                    }
                    _ => {}
                }
                vec![
                    kind,
                    a.pod_uid.clone(),
                    a.target.clone(),
                    a.reason.clone(),
                    a.evidence.join("; "),
                ]
            })
            .collect();
        out.push_str(&table::render(
            &["KIND", "POD UID", "TARGET", "REASON", "EVIDENCE"],
            &rows,
        ));
    }
    if !plan.findings.is_empty() {
        out.push('\n');
        let rows: Vec<Vec<String>> = plan
            .findings
            .iter()
            .map(|f| {
                vec![
                    f.kind().as_str_name().to_owned(),
                    f.category.clone(),
                    f.pod_uid.clone(),
                    f.target.clone(),
                    f.reason.clone(),
                ]
            })
            .collect();
        out.push_str(&table::render(
            &["FINDING", "CATEGORY", "POD UID", "TARGET", "REASON"],
            &rows,
        ));
    }
    out
}

/// The header's cgroup driver line: which driver the cgroups source used, what decided it, and
/// what it saw (docs/housekeeper.md, "Which cgroup driver").
fn driver_line(plan: &Plan) -> String {
    let Some(d) = &plan.cgroup_driver else {
        return "  cgroup driver: not decided (the cgroups source failed; see below)\n".to_owned();
    };
    let driver = if d.driver.is_empty() {
        "not decided"
    } else {
        &d.driver
    };
    let by = match d.found_by.as_str() {
        "runtime-config" => " (from containerd's CRI RuntimeConfig)",
        "layout" => " (from the layout on disk)",
        "flag" => " (from --cgroup-driver)",
        _ => "",
    };
    format!(
        "  cgroup driver: {}{by}, cgroup {}: {}\n",
        for_terminal(driver),
        for_terminal(&d.cgroup_version),
        for_terminal(&d.evidence.join("; "))
    )
}

#[cfg(test)]
mod tests {
    use podward_api::housekeeper::v1::{Action, ActionKind, Finding, FindingKind};

    use super::*;

    #[test]
    fn the_header_says_what_the_daemon_will_do() {
        let header = |preview, dry_run| {
            let plan = Plan {
                pass: 7,
                preview,
                dry_run,
                sources_ok: true,
                ..Default::default()
            };
            render_table(&plan)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(
            header(true, false),
            "next pass 7 (ACTS: the daemon will execute these actions): sources ok"
        );
        assert_eq!(
            header(true, true),
            "next pass 7 (dry run: nothing will be changed): sources ok"
        );
        assert_eq!(header(false, true), "pass 7 (dry run): sources ok");
        assert_eq!(header(false, false), "pass 7 (acted): sources ok");
    }

    #[test]
    fn table_lists_kind_uid_target_reason_evidence() {
        let plan = Plan {
            sources_ok: true,
            actions: vec![Action {
                kind: ActionKind::RemovePodDir as i32,
                pod_uid: "u1".into(),
                target: "/k/pods/u1".into(),
                reason: "orphaned pod directory".into(),
                evidence: vec!["no sandbox".into(), "nothing mounted".into()],
                ..Default::default()
            }],
            findings: vec![Finding {
                kind: FindingKind::Waiting as i32,
                category: "cgroup".into(),
                pod_uid: "u2".into(),
                target: "kubepods/podu2".into(),
                reason: "grace".into(),
            }],
            ..Default::default()
        };
        let t = render_table(&plan);
        assert!(t.contains("KIND"), "{t}");
        let row = t
            .lines()
            .find(|l| l.starts_with("REMOVE_POD_DIR"))
            .expect("action row");
        for part in [
            "u1",
            "/k/pods/u1",
            "orphaned pod directory",
            "no sandbox; nothing mounted",
        ] {
            assert!(row.contains(part), "{row}");
        }
        assert!(
            t.lines()
                .any(|l| l.starts_with("WAITING") && l.contains("u2")),
            "{t}"
        );
    }
}

#[cfg(test)]
mod json_tests {
    use podward_api::housekeeper::v1::{Action, Finding};

    use super::*;

    #[test]
    fn plan_json_names_enums() {
        let plan = Plan {
            actions: vec![Action {
                kind: ActionKind::RemoveCgroup as i32,
                outcome: Outcome::Planned as i32,
                ..Default::default()
            }],
            findings: vec![Finding {
                kind: FindingKind::Blocked as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        let v = plan_json(&plan).expect("json");
        assert_eq!(v["actions"][0]["kind"], "REMOVE_CGROUP");
        assert_eq!(v["actions"][0]["outcome"], "PLANNED");
        assert_eq!(v["findings"][0]["kind"], "BLOCKED");
    }
}

#[cfg(test)]
mod driver_line_tests {
    use podward_api::housekeeper::v1::CgroupDriverReport;

    use super::*;

    #[test]
    fn the_header_names_the_driver_what_decided_it_and_what_was_seen() {
        let mut plan = Plan {
            cgroup_driver: Some(CgroupDriverReport {
                driver: "cgroupfs".into(),
                found_by: "flag".into(),
                cgroup_version: "v1".into(),
                evidence: vec!["a".into(), "b".into()],
            }),
            ..Default::default()
        };
        let line = |p: &Plan| {
            render_table(p)
                .lines()
                .nth(1)
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(
            line(&plan),
            "  cgroup driver: cgroupfs (from --cgroup-driver), cgroup v1: a; b"
        );
        plan.cgroup_driver = None;
        assert_eq!(
            line(&plan),
            "  cgroup driver: not decided (the cgroups source failed; see below)"
        );
    }
}
