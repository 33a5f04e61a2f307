//! The container's namespaces as the helper joins them: which, in what order, and `setns`.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;

use super::failure::{Res, err};

/// `CLONE_NEWTIME` (nix has no constant for it).
pub(super) const CLONE_NEWTIME: i32 = 0x80;

/// Namespaces joined, in runc's order (time last: it, like pid, applies to children): the name
/// under `/proc/<pid>/ns/` of the container's init, the name of this process's own (the same
/// one it joins for its children), and the `setns` flag.
pub(super) const NAMESPACES: [(&str, &str, i32); 7] = [
    ("ipc", "ipc", libc::CLONE_NEWIPC),
    ("uts", "uts", libc::CLONE_NEWUTS),
    ("net", "net", libc::CLONE_NEWNET),
    ("pid", "pid_for_children", libc::CLONE_NEWPID),
    ("mnt", "mnt", libc::CLONE_NEWNS),
    ("cgroup", "cgroup", libc::CLONE_NEWCGROUP),
    ("time", "time_for_children", CLONE_NEWTIME),
];

/// The names of [`NAMESPACES`] under `/proc/<pid>/ns/`, as the plan records them.
pub(crate) const NAMESPACE_NAMES: [&str; 7] = ["ipc", "uts", "net", "pid", "mnt", "cgroup", "time"];

/// A namespace of the container's init to join, opened.
pub(super) struct Join {
    pub(super) name: &'static str,
    pub(super) fd: OwnedFd,
    pub(super) flag: i32,
}

/// Joins every namespace of `joins`, in their order.
pub(super) fn enter(joins: &[Join]) -> Res<()> {
    for j in joins {
        nix::sched::setns(&j.fd, nix::sched::CloneFlags::from_bits_retain(j.flag))
            .map_err(err(format!("setns {}", j.name)))?;
    }
    Ok(())
}

/// `(device, inode)` of a namespace file.
pub(super) fn ns_id(path: &str) -> Option<(u64, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}
