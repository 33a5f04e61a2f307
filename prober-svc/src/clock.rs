//! Time for the workers: a monotonic clock for scheduling (tokio's, so tests can pause and advance
//! it) and a wall clock to compare against the container's `started_at` (CRI gives Unix ns).
//!
//! The wall clock is derived from tokio's monotonic clock plus the wall time at construction, so a
//! test that advances paused tokio time also advances "now" for the initialDelay comparison, and a
//! step of the system clock (NTP) cannot make a worker skip or repeat its initial delay.

use std::time::Duration;

use tokio::time::Instant;

/// The prober's clock. Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base: Instant,
    base_wall_ns: i64,
}

impl Clock {
    /// A clock whose wall time starts at the system's current time.
    pub fn system() -> Self {
        Self::starting_at(podward_api::time::now_ns())
    }

    /// A clock whose wall time is `wall_ns` now (tests pin it to a round number).
    pub fn starting_at(wall_ns: i64) -> Self {
        Self {
            base: Instant::now(),
            base_wall_ns: wall_ns,
        }
    }

    /// Monotonic now (tokio's clock: pausable in tests).
    pub fn instant(&self) -> Instant {
        Instant::now()
    }

    /// Wall-clock now, Unix nanoseconds.
    pub fn now_ns(&self) -> i64 {
        let elapsed = i64::try_from(self.base.elapsed().as_nanos()).unwrap_or(i64::MAX);
        self.base_wall_ns.saturating_add(elapsed)
    }

    /// Time since this clock was created (the prober's start).
    pub fn since_start(&self) -> Duration {
        self.base.elapsed()
    }

    /// The monotonic instant this clock was created.
    pub fn start(&self) -> Instant {
        self.base
    }

    /// Wall-clock time this clock was created, Unix nanoseconds.
    pub fn start_ns(&self) -> i64 {
        self.base_wall_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn wall_time_follows_paused_tokio_time() {
        let c = Clock::starting_at(1_000);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(c.now_ns(), 1_000 + 2_000_000_000);
        assert_eq!(c.since_start(), Duration::from_secs(2));
    }
}
