//! Resource limits by name and as `/proc/<pid>/limits` shows them.

use crate::direct_exec::plan::Rlimit;

/// `RLIMIT_*` by the spec's name.
pub(super) fn rlimit_number(name: &str) -> Option<u32> {
    const NAMES: [&str; 16] = [
        "RLIMIT_CPU",
        "RLIMIT_FSIZE",
        "RLIMIT_DATA",
        "RLIMIT_STACK",
        "RLIMIT_CORE",
        "RLIMIT_RSS",
        "RLIMIT_NPROC",
        "RLIMIT_NOFILE",
        "RLIMIT_MEMLOCK",
        "RLIMIT_AS",
        "RLIMIT_LOCKS",
        "RLIMIT_SIGPENDING",
        "RLIMIT_MSGQUEUE",
        "RLIMIT_NICE",
        "RLIMIT_RTPRIO",
        "RLIMIT_RTTIME",
    ];
    NAMES.iter().position(|n| *n == name).map(|i| i as u32)
}

/// `/proc/<pid>/limits` rows, in the kernel's order (`RLIMIT_*` 0..=15).
pub(crate) fn parse_limits(text: &str) -> Vec<Rlimit> {
    let value = |s: &str| {
        if s == "unlimited" {
            Some(u64::MAX)
        } else {
            s.parse().ok()
        }
    };
    text.lines()
        .skip(1)
        .enumerate()
        .filter_map(|(i, line)| {
            // "Max open files            1024                 4096                 files"
            let cols: Vec<&str> = line.get(26..)?.split_whitespace().collect();
            Some(Rlimit {
                resource: i as u32,
                soft: value(cols.first()?)?,
                hard: value(cols.get(1)?)?,
            })
        })
        .take(16)
        .collect()
}
