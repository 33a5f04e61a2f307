//! The orphan rule: a pod UID is an orphan only when no sandbox of it was in the runtime in
//! every pass for at least `orphan_grace`, and in at least [`MIN_PASSES`] passes.
//!
//! The tracker remembers, per UID that something on the node still belongs to (a cgroup, a pod
//! dir, a log dir), when it was first seen absent and in how many consecutive passes. Any
//! sighting in the runtime forgets the UID, so the next absence starts from zero. A pass that
//! could not read its sources breaks the chain of evidence, so [`OrphanTracker::reset`] forgets
//! everything (kubelet's `sourcesReady` rule, applied to the whole history).
//!
//! It also keeps each UID's place in the queue of orphans to act on ([`OrphanTracker::queue_key`]):
//! a pass acts on a bounded number of orphans, and those that waited longest for a turn go first,
//! so no number of orphans that stay (a safety rule keeps them) holds the turns of the others.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Fewest consecutive passes that must see a UID absent. Two means that a single runtime list
/// (possibly racing a RunPodSandbox) is never enough, even with a zero grace.
pub const MIN_PASSES: u32 = 2;

/// What the history says about one UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Seen in the runtime in this pass (or not tracked): not an orphan.
    Present,
    /// Absent, but not yet long enough.
    Waiting {
        /// Consecutive passes without a sandbox.
        passes: u32,
        /// Time since the first of them.
        absent_for: Duration,
    },
    /// Absent in every pass for at least the grace period.
    Orphaned {
        /// Consecutive passes without a sandbox.
        passes: u32,
        /// Time since the first of them.
        absent_for: Duration,
    },
}

impl Verdict {
    /// Plain-words evidence, e.g. "no sandbox for uid X in 5 passes over 2m10s".
    pub fn evidence(&self, uid: &str) -> String {
        match self {
            Self::Present => format!("uid {uid} has a sandbox in the runtime"),
            Self::Waiting { passes, absent_for } | Self::Orphaned { passes, absent_for } => {
                format!(
                    "no sandbox for uid {uid} in {passes} pass{} over {}",
                    if *passes == 1 { "" } else { "es" },
                    human(*absent_for)
                )
            }
        }
    }
}

/// A duration in whole seconds, as humans write it ("2m 10s").
pub fn human(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

#[derive(Clone, Copy, Debug)]
struct Absence {
    first_absent: Duration,
    passes: u32,
    /// When the UID last had its turn in a recording pass, or was first seen absent.
    turn: Duration,
}

/// Per-UID absence history. Its size is bounded by the number of UIDs that still own something
/// on the node: UIDs that own nothing any more are dropped at each pass.
#[derive(Clone, Debug)]
pub struct OrphanTracker {
    grace: Duration,
    absent: HashMap<String, Absence>,
}

impl OrphanTracker {
    /// An empty history with the given grace period.
    pub fn new(grace: Duration) -> Self {
        Self {
            grace,
            absent: HashMap::new(),
        }
    }

    /// Folds in one successful pass: `present` are the UIDs with a sandbox (or container) in the
    /// runtime, `candidates` the UIDs that own something on the node.
    pub fn observe<'a>(
        &mut self,
        now: Duration,
        present: &HashSet<String>,
        candidates: impl IntoIterator<Item = &'a str>,
    ) {
        let mut seen = HashSet::new();
        for uid in candidates {
            if present.contains(uid) || !seen.insert(uid) {
                continue;
            }
            let entry = self.absent.entry(uid.to_owned()).or_insert(Absence {
                first_absent: now,
                passes: 0,
                turn: now,
            });
            entry.passes = entry.passes.saturating_add(1);
        }
        // A sighting resets; a UID that owns nothing any more needs no history.
        self.absent.retain(|uid, _| seen.contains(uid.as_str()));
    }

    /// Forgets every UID: a pass that could not read its sources is no evidence of absence.
    pub fn reset(&mut self) {
        self.absent.clear();
    }

    /// The verdict for `uid` after the last [`observe`](Self::observe).
    pub fn verdict(&self, uid: &str, now: Duration) -> Verdict {
        let Some(a) = self.absent.get(uid) else {
            return Verdict::Present;
        };
        let absent_for = now.saturating_sub(a.first_absent);
        if a.passes >= MIN_PASSES && absent_for >= self.grace {
            Verdict::Orphaned {
                passes: a.passes,
                absent_for,
            }
        } else {
            Verdict::Waiting {
                passes: a.passes,
                absent_for,
            }
        }
    }

    /// Where `uid` stands in the queue of orphans to act on: the one with the smallest key waited
    /// longest for its turn (since its last turn or, before any, since it was first seen absent);
    /// ties go to the lower UID, so a dry run and the recording pass after it choose alike.
    pub fn queue_key<'a>(&self, uid: &'a str) -> (Duration, &'a str) {
        let turn = self.absent.get(uid).map_or(Duration::ZERO, |a| a.turn);
        (turn, uid)
    }

    /// Records that `uids` had their turn at `now`: they go to the back of the queue.
    pub fn took_turns<'a>(&mut self, uids: impl IntoIterator<Item = &'a str>, now: Duration) {
        for uid in uids {
            if let Some(a) = self.absent.get_mut(uid) {
                a.turn = now;
            }
        }
    }

    /// Number of UIDs with an absence history.
    pub fn len(&self) -> usize {
        self.absent.len()
    }

    /// Whether no UID has an absence history.
    pub fn is_empty(&self) -> bool {
        self.absent.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(uids: &[&str]) -> HashSet<String> {
        uids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn orphan_only_after_grace_and_two_passes() {
        let mut t = OrphanTracker::new(Duration::from_secs(120));
        let none = set(&[]);
        t.observe(Duration::from_secs(0), &none, ["a"]);
        assert!(matches!(
            t.verdict("a", Duration::ZERO),
            Verdict::Waiting { passes: 1, .. }
        ));
        t.observe(Duration::from_secs(119), &none, ["a"]);
        let v = t.verdict("a", Duration::from_secs(119));
        assert!(matches!(v, Verdict::Waiting { passes: 2, .. }), "{v:?}");
        t.observe(Duration::from_secs(130), &none, ["a"]);
        let v = t.verdict("a", Duration::from_secs(130));
        assert_eq!(
            v,
            Verdict::Orphaned {
                passes: 3,
                absent_for: Duration::from_secs(130)
            }
        );
        assert_eq!(
            v.evidence("a"),
            "no sandbox for uid a in 3 passes over 2m 10s"
        );
    }

    #[test]
    fn zero_grace_still_needs_two_passes() {
        let mut t = OrphanTracker::new(Duration::ZERO);
        t.observe(Duration::ZERO, &set(&[]), ["a"]);
        assert!(matches!(
            t.verdict("a", Duration::ZERO),
            Verdict::Waiting { .. }
        ));
        t.observe(Duration::ZERO, &set(&[]), ["a"]);
        assert!(matches!(
            t.verdict("a", Duration::ZERO),
            Verdict::Orphaned { .. }
        ));
    }

    #[test]
    fn a_sighting_resets_the_clock() {
        let mut t = OrphanTracker::new(Duration::from_secs(10));
        t.observe(Duration::from_secs(0), &set(&[]), ["a"]);
        t.observe(Duration::from_secs(5), &set(&["a"]), ["a"]);
        assert_eq!(t.verdict("a", Duration::from_secs(5)), Verdict::Present);
        t.observe(Duration::from_secs(11), &set(&[]), ["a"]);
        t.observe(Duration::from_secs(12), &set(&[]), ["a"]);
        // Absent since 11s only: 1s < 10s grace.
        assert!(matches!(
            t.verdict("a", Duration::from_secs(12)),
            Verdict::Waiting { passes: 2, .. }
        ));
    }

    #[test]
    fn the_queue_puts_the_longest_wait_first() {
        let mut t = OrphanTracker::new(Duration::ZERO);
        t.observe(Duration::from_secs(1), &set(&[]), ["b", "a"]);
        t.observe(Duration::from_secs(2), &set(&[]), ["b", "a", "c"]);
        let order = |t: &OrphanTracker| {
            let mut uids = vec!["a", "b", "c"];
            uids.sort_by_key(|u| t.queue_key(u));
            uids
        };
        assert_eq!(order(&t), ["a", "b", "c"], "first seen first, then by UID");
        t.took_turns(["a"], Duration::from_secs(3));
        assert_eq!(order(&t), ["b", "c", "a"], "a turn sends a UID to the back");
        t.took_turns(["unknown"], Duration::from_secs(4));
        assert_eq!(t.len(), 3, "a turn never adds history");
    }

    #[test]
    fn reset_and_vanished_candidates_forget() {
        let mut t = OrphanTracker::new(Duration::ZERO);
        t.observe(Duration::ZERO, &set(&[]), ["a", "b", "a"]);
        assert_eq!(t.len(), 2);
        t.observe(Duration::ZERO, &set(&[]), ["a"]);
        assert_eq!(t.len(), 1, "b owns nothing any more");
        assert!(matches!(
            t.verdict("a", Duration::ZERO),
            Verdict::Orphaned { passes: 2, .. }
        ));
        t.reset();
        assert!(t.is_empty());
        assert_eq!(t.verdict("a", Duration::ZERO), Verdict::Present);
    }
}
