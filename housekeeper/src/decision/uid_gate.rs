//! Which UIDs may be acted on now: one action per UID at a time, and a per-UID exponential
//! backoff after a failure (kubelet PR #137305 and issue #135825: without these, a stuck UID
//! gets a new destroy every pass and work piles up). An orphan that a safety rule keeps (a file
//! under `volumes/`, a mount) backs off the same way: reassessing it every pass would change
//! nothing and spend a pass's bounded turns on it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use podward_api::backoff::Backoff;

/// First delay after a failure.
pub const BACKOFF_MIN: Duration = Duration::from_secs(10);
/// Longest delay between two attempts on the same UID.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct Retry {
    backoff: Backoff,
    not_before: Duration,
    last_failure: Duration,
    cause: Cause,
}

/// Why a UID waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// An action on it failed.
    Failed,
    /// A safety rule kept what it owns.
    Kept,
}

#[derive(Debug, Default)]
struct State {
    in_flight: HashSet<String>,
    retries: HashMap<String, Retry>,
}

impl State {
    /// Why `uid` may not be acted on at `now`, if it may not: an action on it is in flight, or
    /// it is backing off.
    fn closed(&self, uid: &str, now: Duration) -> Result<(), Closed> {
        if self.in_flight.contains(uid) {
            return Err(Closed::InFlight);
        }
        match self.retries.get(uid) {
            Some(r) if now < r.not_before => Err(Closed::BackingOff(r.cause, r.not_before - now)),
            _ => Ok(()),
        }
    }
}

/// Shared between every pass of one daemon (clones share state).
#[derive(Clone, Debug, Default)]
pub struct UidGate {
    state: Arc<Mutex<State>>,
}

/// Why a UID may not be acted on now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closed {
    /// Another action on this UID has not finished.
    InFlight,
    /// A previous action failed, or a safety rule kept the UID's things; the next try is due
    /// in this long.
    BackingOff(Cause, Duration),
}

/// Proof that this caller holds the UID; dropping it lets the next action in.
#[derive(Debug)]
pub struct Permit {
    uid: String,
    state: Arc<Mutex<State>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.state.lock().in_flight.remove(&self.uid);
    }
}

impl UidGate {
    /// A gate with no history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `uid` may be acted on at `now` (without taking it).
    pub fn check(&self, uid: &str, now: Duration) -> Result<(), Closed> {
        self.state.lock().closed(uid, now)
    }

    /// Takes `uid` for one action (single-flight), or says why not.
    pub fn acquire(&self, uid: &str, now: Duration) -> Result<Permit, Closed> {
        let mut st = self.state.lock();
        st.closed(uid, now)?;
        st.in_flight.insert(uid.to_owned());
        Ok(Permit {
            uid: uid.to_owned(),
            state: self.state.clone(),
        })
    }

    /// Records a failure: the next attempt waits for the UID's next backoff delay.
    pub fn failed(&self, uid: &str, now: Duration) {
        self.back_off(uid, now, Cause::Failed);
    }

    /// Records that a safety rule kept what `uid` owns: it is reassessed after the UID's next
    /// backoff delay, not at every pass.
    pub fn kept(&self, uid: &str, now: Duration) {
        self.back_off(uid, now, Cause::Kept);
    }

    fn back_off(&self, uid: &str, now: Duration, cause: Cause) {
        let mut st = self.state.lock();
        let r = st.retries.entry(uid.to_owned()).or_insert_with(|| Retry {
            backoff: Backoff::new(BACKOFF_MIN, BACKOFF_MAX, 0.1),
            not_before: now,
            last_failure: now,
            cause,
        });
        r.not_before = now + r.backoff.next_delay();
        r.last_failure = now;
        r.cause = cause;
    }

    /// Records a success: the UID's backoff starts over.
    pub fn succeeded(&self, uid: &str) {
        self.state.lock().retries.remove(uid);
    }

    /// Drops backoff entries not updated for 2 × the maximum delay (client-go `Backoff.GC`), so
    /// the map stays bounded by the UIDs that recently failed.
    pub fn gc(&self, now: Duration) {
        self.state
            .lock()
            .retries
            .retain(|_, r| now.saturating_sub(r.last_failure) < 2 * BACKOFF_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_action_per_uid_at_a_time() {
        let g = UidGate::new();
        let p = g.acquire("a", Duration::ZERO).expect("first");
        assert_eq!(g.acquire("a", Duration::ZERO).err(), Some(Closed::InFlight));
        assert!(
            g.acquire("b", Duration::ZERO).is_ok(),
            "other UIDs are independent"
        );
        drop(p);
        assert!(g.acquire("a", Duration::ZERO).is_ok());
    }

    #[test]
    fn failures_back_off_exponentially_and_success_resets() {
        let g = UidGate::new();
        let t0 = Duration::from_secs(100);
        g.failed("a", t0);
        let Err(Closed::BackingOff(Cause::Failed, d1)) = g.check("a", t0) else {
            panic!("must back off");
        };
        assert!(
            d1 >= Duration::from_secs(9) && d1 <= Duration::from_secs(11),
            "{d1:?}"
        );
        let t1 = t0 + d1;
        assert!(g.check("a", t1).is_ok());
        g.failed("a", t1);
        let Err(Closed::BackingOff(Cause::Failed, d2)) = g.check("a", t1) else {
            panic!("must back off");
        };
        assert!(d2 >= Duration::from_secs(18), "doubles: {d2:?}");
        g.succeeded("a");
        assert!(g.check("a", t1).is_ok());
    }

    #[test]
    fn a_kept_uid_backs_off_with_its_cause() {
        let g = UidGate::new();
        let t0 = Duration::from_secs(100);
        g.kept("a", t0);
        let Err(Closed::BackingOff(Cause::Kept, d1)) = g.check("a", t0) else {
            panic!("must back off as kept");
        };
        let t1 = t0 + d1;
        assert!(g.acquire("a", t1).is_ok(), "due again after the delay");
        g.kept("a", t1);
        let Err(Closed::BackingOff(Cause::Kept, d2)) = g.check("a", t1) else {
            panic!("must back off as kept");
        };
        assert!(d2 > d1, "kept again: the delay grows ({d1:?} then {d2:?})");
    }

    #[test]
    fn gc_forgets_old_failures() {
        let g = UidGate::new();
        g.failed("a", Duration::ZERO);
        g.gc(2 * BACKOFF_MAX);
        assert!(g.state.lock().retries.is_empty());
    }
}
