//! Time for grace periods and backoff, behind a trait so tests can move it by hand.
//!
//! Orphan decisions compare durations ("absent for 2m10s"), so the clock is monotonic: a wall
//! clock step (NTP, a VM resume) must not make a live pod look old enough to delete.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

/// A monotonic clock: time elapsed since an arbitrary origin.
pub trait Clock: Send + Sync + 'static {
    /// Now, as time since this clock's origin.
    fn now(&self) -> Duration;
}

/// The real clock (tokio's `Instant`, so `tokio::time::pause` also works in tests).
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    origin: tokio::time::Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that only moves when told to (tests).
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<Mutex<Duration>>,
}

impl ManualClock {
    /// A clock at its origin.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        *self.now.lock() += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.lock()
    }
}
