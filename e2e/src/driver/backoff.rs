//! kubelet's crash-loop back-off, as the driver's restarts can emulate it: client-go's
//! `flowcontrol.Backoff` as kubelet builds it (`NewBackOff(10s, 300s)`, no jitter), keyed as
//! kubelet's `getStableKey` keys it (pod name, namespace, UID, container name, container hash),
//! and consulted as `doBackOff` does: with the `finishedAt` of the container's exited instance,
//! before each restart.
//!
//! Every duration (the initial 10 s, the 300 s cap and the 2 × cap after which an entry counts
//! as stable) is multiplied by a scale, so that a test can walk six steps of the schedule in
//! seconds: at scale 0.05 the schedule 0, 10, 20, 40, 80, 160 s becomes 0, 0.5, 1, 2, 4, 8 s.

use std::collections::HashMap;
use std::time::Duration;

/// kubelet's `backOffPeriod`: the first back-off.
pub(crate) const INITIAL: Duration = Duration::from_secs(10);
/// kubelet's `MaxContainerBackOff`.
pub(crate) const MAX: Duration = Duration::from_secs(300);

/// One key's state (`backoffEntry`).
#[derive(Debug, Clone, Copy)]
struct Entry {
    backoff_ns: i64,
    last_update_ns: i64,
}

/// `flowcontrol.Backoff` with kubelet's parameters times `scale`, on wall-clock nanoseconds.
#[derive(Debug, Clone)]
pub(crate) struct KubeletBackoff {
    initial_ns: i64,
    max_ns: i64,
    entries: HashMap<String, Entry>,
}

fn ns(d: Duration, scale: f64) -> i64 {
    (d.as_nanos() as f64 * scale) as i64
}

impl KubeletBackoff {
    /// kubelet's back-off with every duration times `scale` (1.0: kubelet's own).
    pub(crate) fn new(scale: f64) -> Self {
        Self {
            initial_ns: ns(INITIAL, scale),
            max_ns: ns(MAX, scale),
            entries: HashMap::new(),
        }
    }

    /// `hasExpired`: an entry not updated for twice the cap before `event_ns` is stable again.
    fn expired(&self, e: &Entry, event_ns: i64) -> bool {
        event_ns - e.last_update_ns > 2 * self.max_ns
    }

    /// `IsInBackOffSince(key, finishedAt)`: whether a restart must still wait at `now_ns`.
    pub(crate) fn in_backoff_since(&self, key: &str, event_ns: i64, now_ns: i64) -> bool {
        match self.entries.get(key) {
            Some(e) if !self.expired(e, event_ns) => now_ns - event_ns < e.backoff_ns,
            _ => false,
        }
    }

    /// `Next(key, finishedAt)`: a restart happens now; the next one waits twice as long (up to
    /// the cap), or the initial back-off for a new or stable key.
    pub(crate) fn next(&mut self, key: &str, event_ns: i64, now_ns: i64) {
        let backoff_ns = match self.entries.get(key) {
            Some(e) if !self.expired(e, event_ns) => (e.backoff_ns * 2).min(self.max_ns),
            _ => self.initial_ns,
        };
        self.entries.insert(
            key.to_owned(),
            Entry {
                backoff_ns,
                last_update_ns: now_ns,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_doubles_from_the_initial_to_the_cap_and_resets_when_stable() {
        let s = 1_000_000_000i64;
        let mut b = KubeletBackoff::new(1.0);
        // First exit: no entry, restart at once.
        assert!(!b.in_backoff_since("k", 0, 0));
        b.next("k", 0, 0);
        let mut t = 0;
        for want in [10, 20, 40, 80, 160, 300, 300] {
            t += s; // the container ran one second, then exited at t
            assert!(b.in_backoff_since("k", t, t + want * s - 1), "{want}");
            assert!(!b.in_backoff_since("k", t, t + want * s), "{want}");
            t += want * s;
            b.next("k", t - want * s, t);
        }
        // Stable for more than 2 × 300 s: back to no wait.
        let late = t + 601 * s;
        assert!(!b.in_backoff_since("k", late, late));
    }
}
