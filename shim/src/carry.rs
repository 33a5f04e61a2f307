//! Undelivered results carried from one shim process to the next.
//!
//! The index is rebuilt from the runtime at start, and the runtime does not know whether kubelet
//! received a RunPodSandbox or CreateContainer answer: without help, a restarted shim would
//! list as *delivery unknown* the very sandboxes the housekeeper must find (a RunPodSandbox
//! that kubelet gave up on, or that the previous shim cut at shutdown, while containerd
//! finished it). So at exit the shim writes down, by their CRI metadata, the calls whose result
//! never reached kubelet — the entries it holds as undelivered, and the calls it saw abandoned
//! (their result not seen yet, or cut at shutdown) — and the next shim reads them at start,
//! before its rebuild, which then marks the matching sandboxes and containers undelivered again.
//!
//! The file is written whole to a temporary name and renamed (a crash leaves the old one or
//! none), mode 0600, bounded ([`MAX_CARRIED`] calls, [`MAX_FILE_BYTES`]); it is removed once
//! read. One that cannot be read or parsed is reported and ignored: the shim starts anyway, and
//! what it costs is what a shim without the file would have shown (delivery unknown).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use podward_api::shim::v1::{Container, Delivery, Sandbox};
use serde::{Deserialize, Serialize};

use crate::index::{Abandoned, Index};

/// Most calls carried (the index remembers as many abandoned calls; undelivered entries past
/// this are the oldest and are dropped first).
pub const MAX_CARRIED: usize = 4096;

/// Largest file read back (a few hundred bytes per call at most).
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// The file's format version; a file of another version is ignored (and reported).
const VERSION: u32 = 1;

/// One call whose result never reached its caller, by the CRI metadata that finds its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Carried {
    /// A RunPodSandbox: its pod's metadata.
    RunPodSandbox {
        /// Pod name.
        name: String,
        /// Pod namespace.
        namespace: String,
        /// Pod UID.
        uid: String,
        /// Sandbox attempt.
        attempt: u32,
    },
    /// A CreateContainer: its sandbox and the container's metadata.
    CreateContainer {
        /// Sandbox ID.
        sandbox_id: String,
        /// Container name.
        name: String,
        /// Container attempt.
        attempt: u32,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct File {
    version: u32,
    calls: Vec<Carried>,
}

/// Why the carried calls could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CarryError {
    /// The file could not be read, written or renamed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("{0}: larger than {MAX_FILE_BYTES} bytes; ignored")]
    TooLarge(PathBuf),
    /// The file is not this format (or of another version).
    #[error("{path}: not a list of undelivered calls ({why}); ignored")]
    Format {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CarryError + '_ {
    move |source| CarryError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What `index` knows was never delivered: its undelivered sandboxes and containers, then the
/// calls it saw abandoned, at most [`MAX_CARRIED`].
pub fn from_index(index: &Index) -> Vec<Carried> {
    let snap = index.snapshot(0, "", false, false, 0);
    let sandboxes = snap
        .sandboxes
        .iter()
        .filter(|s| s.run_delivery == Delivery::Undelivered as i32)
        .map(sandbox_call);
    let containers = snap
        .containers
        .iter()
        .filter(|c| c.create_delivery == Delivery::Undelivered as i32)
        .map(container_call);
    let abandoned = index.abandoned.iter().map(|a| match a.clone() {
        Abandoned::Sandbox {
            name,
            namespace,
            uid,
            attempt,
        } => Carried::RunPodSandbox {
            name,
            namespace,
            uid,
            attempt,
        },
        Abandoned::Container {
            sandbox_id,
            name,
            attempt,
        } => Carried::CreateContainer {
            sandbox_id,
            name,
            attempt,
        },
    });
    let mut all: Vec<Carried> = sandboxes.chain(containers).chain(abandoned).collect();
    all.dedup();
    all.truncate(MAX_CARRIED);
    all
}

fn sandbox_call(s: &Sandbox) -> Carried {
    Carried::RunPodSandbox {
        name: s.name.clone(),
        namespace: s.namespace.clone(),
        uid: s.uid.clone(),
        attempt: s.attempt,
    }
}

fn container_call(c: &Container) -> Carried {
    Carried::CreateContainer {
        sandbox_id: c.sandbox_id.clone(),
        name: c.name.clone(),
        attempt: c.attempt,
    }
}

/// Folds carried calls into `index` as abandoned ones, so that the rebuild marks their results
/// undelivered.
pub fn into_index(index: &mut Index, calls: Vec<Carried>) {
    for call in calls {
        index.remember(match call {
            Carried::RunPodSandbox {
                name,
                namespace,
                uid,
                attempt,
            } => Abandoned::Sandbox {
                name,
                namespace,
                uid,
                attempt,
            },
            Carried::CreateContainer {
                sandbox_id,
                name,
                attempt,
            } => Abandoned::Container {
                sandbox_id,
                name,
                attempt,
            },
        });
    }
}

/// Writes `calls` to `path` (nothing, and any old file removed, when there are none).
pub fn save(path: &Path, calls: Vec<Carried>) -> Result<(), CarryError> {
    if calls.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path)(e)),
            _ => Ok(()),
        };
    }
    let body = serde_json::to_vec(&File {
        version: VERSION,
        calls,
    })
    .map_err(|e| CarryError::Format {
        path: path.to_owned(),
        why: e.to_string(),
    })?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(&body).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Reads the calls the previous shim left at `path` and removes the file; none when there is
/// no file.
pub fn take(path: &Path) -> Result<Vec<Carried>, CarryError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(path)(e)),
    };
    // Removed whatever it holds: a file that cannot be used must not be read again.
    let read = if !meta.is_file() {
        Err(CarryError::Format {
            path: path.to_owned(),
            why: "not a regular file".to_owned(),
        })
    } else if meta.len() > MAX_FILE_BYTES {
        Err(CarryError::TooLarge(path.to_owned()))
    } else {
        std::fs::read(path).map_err(io(path))
    };
    let _ = std::fs::remove_file(path);
    let file: File = serde_json::from_slice(&read?).map_err(|e| CarryError::Format {
        path: path.to_owned(),
        why: e.to_string(),
    })?;
    if file.version != VERSION {
        return Err(CarryError::Format {
            path: path.to_owned(),
            why: format!("version {}, this shim reads {VERSION}", file.version),
        });
    }
    let mut calls = file.calls;
    calls.truncate(MAX_CARRIED);
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(uid: &str, attempt: u32) -> Carried {
        Carried::RunPodSandbox {
            name: format!("pod-{uid}"),
            namespace: "ns".into(),
            uid: uid.into(),
            attempt,
        }
    }

    #[test]
    fn calls_survive_the_trip_and_the_file_is_read_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("shim-undelivered.json");
        assert_eq!(take(&path).expect("no file"), Vec::new());
        let calls = vec![
            run("u1", 0),
            Carried::CreateContainer {
                sandbox_id: "sb".into(),
                name: "app".into(),
                attempt: 2,
            },
        ];
        save(&path, calls.clone()).expect("save");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(take(&path).expect("take"), calls);
        assert!(!path.exists(), "removed once read");
        // Nothing to carry: no file.
        save(&path, vec![run("u2", 1)]).expect("save");
        save(&path, Vec::new()).expect("save none");
        assert!(!path.exists());
    }

    #[test]
    fn a_bad_file_is_reported_removed_and_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("shim-undelivered.json");
        std::fs::write(&path, b"{not json").expect("write");
        assert!(matches!(take(&path), Err(CarryError::Format { .. })));
        assert!(!path.exists());
        std::fs::write(&path, br#"{"version":99,"calls":[]}"#).expect("write");
        let e = take(&path).expect_err("another version");
        assert!(e.to_string().contains("version 99"), "{e}");
        // A call of a kind this shim does not know fails the file, not the start.
        std::fs::write(&path, br#"{"version":1,"calls":[{"call":"later"}]}"#).expect("write");
        assert!(take(&path).is_err());
    }
}
