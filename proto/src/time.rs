//! Timestamps on the wire are Unix nanoseconds (`i64`), as in CRI.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now as Unix nanoseconds.
pub fn now_ns() -> i64 {
    to_ns(SystemTime::now())
}

/// A wall-clock time as Unix nanoseconds (0 for times before the epoch, saturating far ahead).
pub fn to_ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Unix nanoseconds back to a wall-clock time (negative values clamp to the epoch).
pub fn from_ns(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}
