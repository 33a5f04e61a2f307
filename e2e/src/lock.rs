//! A cross-process file lock (flock), so concurrent test processes build shared things once.

use std::fs::{File, OpenOptions};
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use crate::error::HarnessError;

/// An exclusive lock on a file; released when dropped (or when the process dies).
#[derive(Debug)]
pub(crate) struct FileLock {
    _lock: Flock<File>,
}

impl FileLock {
    /// Blocks until this process holds the exclusive lock on `path` (created if missing).
    ///
    /// Blocking is fine here: callers run it on a blocking thread (`spawn_blocking`) or before
    /// any async work.
    pub(crate) fn acquire(path: &Path) -> Result<Self, HarnessError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(HarnessError::io("create", dir))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(HarnessError::io("open lock file", path))?;
        let lock =
            Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| HarnessError::Io {
                action: "flock".into(),
                path: path.to_owned(),
                source: errno.into(),
            })?;
        Ok(Self { _lock: lock })
    }
}
