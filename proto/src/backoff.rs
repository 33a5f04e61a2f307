//! A jittered exponential backoff, the one retry schedule for every reconnect loop.
//!
//! Hand-written (about 40 lines) rather than a crate: the crates on offer either pull in their own
//! async runtime glue or retry closures for us; here the caller owns the loop and only asks
//! "how long until the next try?".

use std::time::Duration;

use rand::Rng;

/// Exponential backoff between `min` and `max`, with up to ±`jitter` (0..=1) of each delay.
#[derive(Clone, Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    jitter: f64,
    next: Duration,
}

impl Backoff {
    /// A schedule that starts at `min`, doubles, and never exceeds `max`.
    pub fn new(min: Duration, max: Duration, jitter: f64) -> Self {
        let max = max.max(min);
        Self {
            min,
            max,
            jitter: jitter.clamp(0.0, 1.0),
            next: min,
        }
    }

    /// The schedule used to reconnect to a peer daemon or to containerd: 100 ms doubling to 5 s.
    pub fn reconnect() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(5), 0.2)
    }

    /// The delay before the next attempt; each call doubles the following one.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        if self.jitter == 0.0 {
            return base;
        }
        let factor = 1.0 + rand::rng().random_range(-self.jitter..=self.jitter);
        base.mul_f64(factor).min(self.max)
    }

    /// Back to the first delay, after a success.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_max_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(35), 0.0);
        let got: Vec<_> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, vec![10, 20, 35, 35]);
        b.reset();
        assert_eq!(b.next_delay().as_millis(), 10);
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1), 0.5);
        for _ in 0..100 {
            let d = b.next_delay();
            assert!(d <= Duration::from_secs(1));
            assert!(d >= Duration::from_millis(50));
        }
    }
}
