//! How long the prober itself could not run: the measure behind the starvation rule (a probe that
//! timed out while the prober was starved is not a failure; `docs/prober.md`, "Starvation").
//!
//! [`TickLag`] is a sampler task on the prober's runtime that sleeps [`TICK`] and adds how late it
//! woke (beyond [`SLACK`], the timer's own granularity) to a running total; a reading also counts
//! the sampler's current wait past its due time, so a starvation still going on when a probe ends
//! is seen. Why this measure rather than a thread's `run_delay` (`/proc/thread-self/schedstat`):
//! - it sees both ways a probe goes unpolled: the process short of CPU (other processes, a cgroup
//!   `cpu.max` throttle), which delays the timer and I/O drivers too, and the runtime's threads
//!   all busy with other tasks, which `run_delay` cannot see (the thread runs, just not the
//!   probe);
//! - a task migrates between worker threads, so a per-thread counter read at the start and the
//!   end of a probe need not describe the threads that polled it;
//! - it is cheap: the sampler wakes 1/[`TICK`] times a second whatever the probe rate, and a
//!   reading is one uncontended lock and a clock read (probes read it twice).
//!
//! What it cannot see: one worker thread stuck while the others (and the sampler) run. Such a
//! probe is judged as kubelet judges it.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// How often the sampler wakes.
pub const TICK: Duration = Duration::from_millis(10);

/// Lateness of a wake-up not counted as starvation: the timer wheel's 1 ms granularity and the
/// wake-up itself.
pub const SLACK: Duration = Duration::from_millis(2);

/// A running total of the prober's own starvation: only its differences mean anything.
pub trait StarvationMeter: Send + Sync + 'static {
    /// Time the prober was starved since the meter started (monotonic).
    fn starved(&self) -> Duration;
}

#[derive(Debug)]
struct Totals {
    /// Lateness counted by completed wake-ups.
    starved: Duration,
    /// When the sampler's pending sleep is due.
    due: Instant,
}

/// The tick-lag sampler (see the module's doc). Cheap to clone; the task ends when the last
/// clone is dropped.
#[derive(Clone, Debug)]
pub struct TickLag {
    totals: Arc<Mutex<Totals>>,
}

impl TickLag {
    /// Starts the sampler on the current tokio runtime (the one that polls the probes).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start() -> Self {
        let totals = Arc::new(Mutex::new(Totals {
            starved: Duration::ZERO,
            due: Instant::now() + TICK,
        }));
        let weak = Arc::downgrade(&totals);
        tokio::spawn(async move {
            loop {
                let due = match weak.upgrade() {
                    Some(t) => t.lock().due,
                    None => return,
                };
                tokio::time::sleep_until(due).await;
                let Some(t) = weak.upgrade() else { return };
                let now = Instant::now();
                let mut t = t.lock();
                t.starved += now.saturating_duration_since(due).saturating_sub(SLACK);
                t.due = now + TICK;
            }
        });
        Self { totals }
    }
}

impl StarvationMeter for TickLag {
    fn starved(&self) -> Duration {
        let t = self.totals.lock();
        t.starved
            + Instant::now()
                .saturating_duration_since(t.due)
                .saturating_sub(SLACK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let t = std::time::Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_runtime_is_counted_and_an_idle_one_is_not() {
        let m = TickLag::start();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let idle = m.starved();
        // Generous: other processes share the test machine.
        assert!(idle < Duration::from_millis(100), "idle runtime: {idle:?}");
        let before = m.starved();
        // The only thread is busy: the sampler cannot run, yet a reading sees the wait.
        spin(Duration::from_millis(300));
        let during = m.starved() - before;
        assert!(during >= Duration::from_millis(250), "ongoing: {during:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let after = m.starved() - before;
        assert!(
            after >= Duration::from_millis(250) && after < Duration::from_millis(400),
            "after the sampler woke: {after:?}"
        );
    }
}
