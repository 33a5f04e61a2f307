//! Latency percentiles, per-path tallies and what `/proc` says of a process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub(crate) fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn proc_status_kb(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The shim's resident memory at one point of the bench.
pub(crate) struct Rss {
    pub(crate) what: &'static str,
    pub(crate) vm_rss_kb: u64,
    pub(crate) rss_anon_kb: u64,
}

impl Rss {
    pub(crate) fn of(pid: u32, what: &'static str) -> Self {
        Self {
            what,
            vm_rss_kb: proc_status_kb(pid, "VmRSS:"),
            rss_anon_kb: proc_status_kb(pid, "RssAnon:"),
        }
    }
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// The process's utime + stime so far, in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command: utime is the 14th field, stime the 15th.
    let rest = s.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// CPU time the process has run so far, in nanoseconds, every thread's, those that have ended
/// included (its CPU-time clock: the scheduler's own count, finer than the 10 ms ticks, for
/// figures per call). A relay with a thread per connection ends one with each connection;
/// counting only the live threads (`/proc/<pid>/task/*`) would lose their time.
pub(crate) fn cpu_ns(pid: u32) -> u64 {
    let Ok(pid) = i32::try_from(pid) else {
        return 0;
    };
    nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(pid))
        .and_then(nix::time::clock_gettime)
        .map_or(0, |t| {
            let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
            let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
            secs * 1_000_000_000 + nanos
        })
}

/// Clock ticks as milliseconds.
pub(crate) fn ticks_ms(ticks: u64) -> f64 {
    ticks as f64 * 1e3 / USER_HZ
}

/// One path under test.
pub(crate) struct Path3 {
    pub(crate) name: String,
    pub(crate) path: PathBuf,
    pub(crate) failures: Arc<AtomicU64>,
    pub(crate) lat: Vec<Duration>,
    /// The same latencies by call of the mix (in [`crate::calls::MIX`]'s order).
    pub(crate) by_call: [Vec<Duration>; 5],
    pub(crate) wall: Duration,
}

impl Path3 {
    pub(crate) fn new(name: &str, path: &Path) -> Self {
        Self {
            name: name.to_owned(),
            path: path.to_owned(),
            failures: Arc::default(),
            lat: Vec::new(),
            by_call: Default::default(),
            wall: Duration::ZERO,
        }
    }

    pub(crate) fn clean(&self) -> bool {
        self.failures.load(Ordering::Relaxed) == 0
    }

    pub(crate) fn throughput(&self) -> f64 {
        self.lat.len() as f64 / self.wall.as_secs_f64()
    }
}

/// Cores the bench sees.
pub(crate) fn num_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// `/proc/loadavg`'s three figures: how busy the shared machine was.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
