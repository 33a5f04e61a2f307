//! What `migrate` did to each pod template, and the report's words for it.

use crate::kubernetes::admission::takeover::SkipReason;

/// What happened to one pod template, for the report on standard error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Probes moved (or, reverting, put back).
    Changed,
    /// Left as it is, and why.
    Skipped(SkipReason),
    /// Reverting: no podward annotation.
    NothingToRevert,
}

/// The report's words for an outcome.
pub fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Changed => "changed".to_owned(),
        Outcome::Skipped(r) => format!("unchanged ({})", r.label()),
        Outcome::NothingToRevert => "unchanged (no podward.io/probes)".to_owned(),
    }
}
