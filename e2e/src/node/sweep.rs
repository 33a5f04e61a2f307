//! Sweeping nodes whose test process died without running `Drop` (SIGKILL, a nextest timeout):
//! each node records its owner (pid and start time); a later [`crate::node::TestNode::start`]
//! removes the footprint of every node whose owner is gone.

use std::path::Path;
use std::time::Duration;

use crate::cleanup::Footprint;

/// The file in a node's dir naming its owner: `<pid> <start time in clock ticks>`.
const OWNER_FILE: &str = "owner";

/// Prefix of node directories in the temp dir.
pub(crate) const DIR_PREFIX: &str = "podward-e2e-";

/// A node dir without an owner file is only swept once this old (it may be starting).
const UNOWNED_GRACE: Duration = Duration::from_secs(600);

/// This process's identity as `<pid> <starttime>` (the start time guards against pid reuse).
fn me() -> Option<String> {
    let pid = std::process::id();
    start_time(pid).map(|t| format!("{pid} {t}"))
}

/// Field 22 of `/proc/<pid>/stat`.
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts at field 3 (state); starttime is field 22.
    rest.split_whitespace().nth(19).map(str::to_owned)
}

/// Records this process as the owner of the node in `dir`.
pub(crate) fn claim(dir: &Path) {
    if let Some(id) = me() {
        let _ = std::fs::write(dir.join(OWNER_FILE), id);
    }
}

/// Whether the owner recorded in `dir` is still running.
fn owner_alive(dir: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(dir.join(OWNER_FILE)).ok()?;
    let (pid, started) = text.trim().split_once(' ')?;
    let pid: u32 = pid.parse().ok()?;
    Some(start_time(pid).as_deref() == Some(started))
}

/// Removes the footprints of nodes whose owner died.
pub(crate) fn sweep_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_prefix(DIR_PREFIX) else {
            continue;
        };
        let dir = entry.path();
        let stale = match owner_alive(&dir) {
            Some(alive) => !alive,
            None => entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > UNOWNED_GRACE),
        };
        if stale {
            tracing::warn!(dir = %dir.display(), "sweeping a test node whose process died");
            Footprint::for_node(dir.clone(), id).remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_is_alive_for_this_process_and_dead_for_a_bogus_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        claim(dir.path());
        assert_eq!(owner_alive(dir.path()), Some(true));
        std::fs::write(
            dir.path().join(OWNER_FILE),
            format!("{} 1", std::process::id()),
        )
        .expect("write");
        assert_eq!(
            owner_alive(dir.path()),
            Some(false),
            "same pid, other start time = reused pid"
        );
    }
}
