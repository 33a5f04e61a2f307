//! A private mount namespace for the calling thread (and the threads it starts afterwards), so
//! that the mounts a test makes never reach the host and vanish with the namespace at the latest.
//! Needs root.

#![allow(dead_code, unreachable_pub, missing_docs)]

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

/// Enters a new mount namespace and makes `/` private in it, so mounts propagate neither way.
pub fn enter_private() {
    unshare(CloneFlags::CLONE_NEWNS).expect("unshare mount ns (needs root)");
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .expect("make / private");
}
