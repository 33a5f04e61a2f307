//! A tmpfs for a test whose tree is large (hundreds of thousands of entries, or thousands of
//! levels): creating it costs a fraction of what a journaled disk filesystem costs, and unmounting
//! frees it at once. Mounted in a private mount namespace, so nothing leaks to the host. Needs
//! root.
//!
//! The namespace is the calling thread's, and the threads it starts afterwards: call
//! [`Tmpfs::mount`] before building a tokio runtime, so its worker and blocking threads see it.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};

#[path = "mount_ns.rs"]
mod mount_ns;

/// A tmpfs mounted at a path until dropped.
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Enters a private mount namespace and mounts a tmpfs at `path` (an existing directory).
    pub fn mount(path: &Path) -> Self {
        mount_ns::enter_private();
        mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .expect("mount tmpfs");
        Tmpfs {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = umount2(&self.path, MntFlags::MNT_DETACH);
    }
}
