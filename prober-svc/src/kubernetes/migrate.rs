//! `podward-prober migrate`: the takeover, offline, on Kubernetes YAML (multi-document; Pods,
//! Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs, and `List`s of them),
//! for teams that change their manifests in Git; `--revert` puts the probes back.
//!
//! A pod template is decided on exactly as the webhook decides on a pod
//! ([`crate::kubernetes::admission::takeover::decide`]: same containers, same skip reasons, same
//! annotations) except that the probes are moved as written, without the API server's defaults,
//! so that `--revert` gives the manifest back. The patch is applied to the YAML itself
//! ([`yaml_patch`]), so keys keep their order (new ones come last); comments are not kept (the
//! YAML library has none).

pub mod outcome;
pub mod revert;
pub mod yaml_patch;

use std::io::{Read, Write};
use std::path::PathBuf;

use serde_norway::Value as Yaml;

pub use self::outcome::{Outcome, describe};
use crate::kubernetes::admission::takeover::{self, Decision, Policy};
use crate::kubernetes::admission::{AdmissionError, DEFAULT_NODE_SELECTOR};
use crate::kubernetes::names::{DEFAULT_GATE_CONDITION, PROBES_ANNOTATION};

/// The flags of `podward-prober migrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// Put the probes back into the containers (undo `migrate`, or a hand-made podward.io/probes).
    #[arg(long)]
    pub revert: bool,
    /// YAML to read ("-": standard input).
    #[arg(short = 'f', long, default_value = "-")]
    pub filename: PathBuf,
    /// Where to write ("-": standard output).
    #[arg(short = 'o', long, default_value = "-")]
    pub output: PathBuf,
    /// The readiness-gate condition added when readiness or startup probes move.
    #[arg(long, default_value = DEFAULT_GATE_CONDITION)]
    pub readiness_gate_condition: String,
    /// KEY=VALUE added to each migrated pod template's nodeSelector (the label of nodes running
    /// podward); empty adds none.
    #[arg(long, default_value = DEFAULT_NODE_SELECTOR)]
    pub node_selector: String,
}

/// Why `migrate` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Input or output failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file ("-" for the standard streams).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A document is not YAML.
    #[error("document {index}: {source}")]
    Yaml {
        /// The document's position, from 1.
        index: usize,
        /// The parser's error.
        #[source]
        source: serde_norway::Error,
    },
    /// A flag is invalid.
    #[error(transparent)]
    Flag(#[from] AdmissionError),
    /// A patch did not apply to the YAML (a bug: the patch was made from the same object).
    #[error("{object}: {message}")]
    Patch {
        /// The object.
        object: String,
        /// What failed.
        message: String,
    },
}

/// One line of the report: the object (`Kind/name`) and what happened to it.
pub type Report = Vec<(String, Outcome)>;

/// Runs `migrate` for `args`: reads, rewrites, writes, and returns the report.
pub fn run(args: &MigrateArgs) -> Result<Report, MigrateError> {
    let policy = Policy {
        gate_condition: args.readiness_gate_condition.trim().to_owned(),
        node_selector: crate::kubernetes::admission::parse_node_selector(&args.node_selector)?,
    };
    let input = read_input(&args.filename)?;
    let (out, report) = rewrite(&input, &policy, args.revert)?;
    write_output(&args.output, &out)?;
    Ok(report)
}

/// Rewrites every document of `input` (migrating, or reverting when `revert`).
pub fn rewrite(
    input: &str,
    policy: &Policy,
    revert: bool,
) -> Result<(String, Report), MigrateError> {
    let mut docs = Vec::new();
    for (i, de) in serde_norway::Deserializer::from_str(input).enumerate() {
        let doc: Yaml =
            serde::Deserialize::deserialize(de).map_err(|source| MigrateError::Yaml {
                index: i + 1,
                source,
            })?;
        docs.push(doc);
    }
    let mut report = Report::new();
    for doc in &mut docs {
        walk(doc, policy, revert, &mut report)?;
    }
    let mut out = String::new();
    for (i, doc) in docs.iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        if i > 0 || !out.is_empty() {
            out.push_str("---\n");
        }
        let text = serde_norway::to_string(doc).map_err(|source| MigrateError::Yaml {
            index: i + 1,
            source,
        })?;
        out.push_str(&text);
    }
    Ok((out, report))
}

/// Rewrites the pod template(s) of one object (a `List`'s items one by one).
fn walk(
    doc: &mut Yaml,
    policy: &Policy,
    revert: bool,
    report: &mut Report,
) -> Result<(), MigrateError> {
    let kind = doc
        .get("kind")
        .and_then(Yaml::as_str)
        .unwrap_or("")
        .to_owned();
    if kind == "List" || kind.ends_with("List") {
        if let Some(Yaml::Sequence(items)) = doc.get_mut("items") {
            for item in items {
                walk(item, policy, revert, report)?;
            }
        }
        return Ok(());
    }
    let path: &[&str] = match kind.as_str() {
        "Pod" => &[],
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => &["spec", "template"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template"],
        _ => return Ok(()),
    };
    let name = doc
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Yaml::as_str)
        .unwrap_or("?");
    let object = format!("{kind}/{name}");
    let mut pod = &mut *doc;
    for key in path {
        match pod.get_mut(*key) {
            Some(next) => pod = next,
            None => return Ok(()),
        }
    }
    if pod.get("spec").is_none_or(|s| !s.is_mapping()) {
        return Ok(());
    }
    let outcome = if revert {
        revert::revert(pod, policy)
    } else {
        migrate_one(pod, policy).map_err(|message| MigrateError::Patch {
            object: object.clone(),
            message,
        })?
    };
    report.push((object, outcome));
    Ok(())
}

/// Moves the probes of one pod (or pod template: `metadata` and `spec`).
fn migrate_one(pod: &mut Yaml, policy: &Policy) -> Result<Outcome, String> {
    let json: serde_json::Value = serde_json::to_value(&*pod).map_err(|e| e.to_string())?;
    match takeover::decide_as_written(&json, policy) {
        Decision::Skip(reason) => Ok(Outcome::Skipped(reason)),
        Decision::TakeOver { patch, .. } => {
            yaml_patch::apply(pod, &patch)?;
            Ok(Outcome::Changed)
        }
    }
}

/// Whether a pod (template) carries the probes annotation.
pub fn has_probes_annotation(pod: &Yaml) -> bool {
    pod.get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(PROBES_ANNOTATION))
        .is_some()
}

fn read_input(path: &PathBuf) -> Result<String, MigrateError> {
    let io = |source| MigrateError::Io {
        path: path.clone(),
        source,
    };
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(io)?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).map_err(io)
    }
}

fn write_output(path: &PathBuf, text: &str) -> Result<(), MigrateError> {
    let io = |source| MigrateError::Io {
        path: path.clone(),
        source,
    };
    if path.as_os_str() == "-" {
        std::io::stdout().write_all(text.as_bytes()).map_err(io)
    } else {
        std::fs::write(path, text).map_err(io)
    }
}
