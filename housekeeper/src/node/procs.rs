//! Process state from `<proc_root>/<pid>/stat`, to tell processes stuck in uninterruptible sleep
//! (D state) from ones that are merely slow to die.

use std::path::Path;

/// The state letter (`R`, `S`, `D`, `Z`, ...) of `pid`, or `None` if it is gone or unreadable.
/// Parsed by the `procfs` crate, which handles `comm` values containing spaces and parentheses.
pub fn process_state(proc_root: &Path, pid: i32) -> Option<char> {
    if pid <= 0 {
        return None;
    }
    let process = procfs::process::Process::new_with_root(proc_root.join(pid.to_string())).ok()?;
    process.stat().ok().map(|s| s.state)
}
