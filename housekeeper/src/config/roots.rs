//! The roots the housekeeper deletes under, checked before anything is read: a root flag that
//! points at the wrong place must stop the daemon with a clear error, not start a cleanup.
//!
//! Names under a root are checked too (`crate::node::kubelet_names`), so a wrong root on its own
//! deletes nothing; this check turns the mistake into an error at start instead of a plan full of
//! foreign entries, and catches what names alone cannot: a log root inside the pods directory,
//! where a pod dir named `<uid>` would read as a legacy log dir and lose the pod dir's safety
//! rules.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use nix::sys::statfs::{CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, statfs};

/// Why a root cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// The root is the filesystem root (after resolving `..` and symlinks).
    #[error(
        "--{flag} {path} is the filesystem root `/`; refusing to start (expected e.g. {example})"
    )]
    Slash {
        /// The flag.
        flag: &'static str,
        /// The value given.
        path: PathBuf,
        /// What it usually is.
        example: &'static str,
    },
    /// The root does not exist or is not a directory.
    #[error("--{flag} {path}: {why}; refusing to start")]
    NotADirectory {
        /// The flag.
        flag: &'static str,
        /// The value given.
        path: PathBuf,
        /// What is there instead.
        why: String,
    },
    /// No cgroup filesystem at or directly under the cgroup root.
    #[error(
        "--cgroup-root {0}: no cgroup filesystem there (neither cgroup2 nor cgroup v1 controllers \
         mounted at it or directly under it); refusing to start"
    )]
    NoCgroupFs(PathBuf),
    /// The log root and the pods directory contain one another.
    #[error(
        "--log-root {log_root} and the pods directory {pods} overlap (one is inside the other); \
         pod directories would be taken for log directories; refusing to start"
    )]
    Overlap {
        /// The log root, resolved.
        log_root: PathBuf,
        /// `<kubelet-root>/pods`, resolved.
        pods: PathBuf,
    },
    /// A root could not be inspected.
    #[error("--{flag} {path}: {source}; refusing to start")]
    Io {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Resolves `path` (symlinks, `..`) and checks that it is a directory other than `/`.
fn directory(flag: &'static str, path: &Path, example: &'static str) -> Result<PathBuf, RootError> {
    let not_a_dir = |why: String| RootError::NotADirectory {
        flag,
        path: path.to_path_buf(),
        why,
    };
    let resolved = match std::fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(not_a_dir("does not exist".to_owned()));
        }
        Err(source) => {
            return Err(RootError::Io {
                flag,
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if resolved == Path::new("/") {
        return Err(RootError::Slash {
            flag,
            path: path.to_path_buf(),
            example,
        });
    }
    if !resolved.is_dir() {
        return Err(not_a_dir("not a directory".to_owned()));
    }
    Ok(resolved)
}

fn is_cgroup_fs(path: &Path) -> Result<bool, nix::Error> {
    let t = statfs(path)?.filesystem_type();
    Ok(t == CGROUP2_SUPER_MAGIC || t == CGROUP_SUPER_MAGIC)
}

/// A cgroup2 mount at `root` (v2), or a cgroup or cgroup2 mount in a directory right under it
/// (v1 and hybrid: `root` is a tmpfs holding `cpu,cpuacct`, `memory`, `unified`, ...).
fn has_cgroup_fs(root: &Path) -> Result<bool, std::io::Error> {
    if is_cgroup_fs(root).map_err(std::io::Error::from)? {
        return Ok(true);
    }
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        // Symlinks such as `cpu -> cpu,cpuacct` point at a sibling that is looked at itself.
        if entry.file_type().is_ok_and(|t| t.is_dir()) && is_cgroup_fs(&entry.path()) == Ok(true) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Checks every root the housekeeper removes things under: the kubelet root, the log root and the
/// cgroup root must be directories other than `/`; the cgroup root must hold a cgroup
/// filesystem; the log root and `<kubelet-root>/pods` must not contain one another. A missing
/// `pods/` is not an error here (kubelet may not have made it yet; every pass reports it).
pub(super) fn check(
    kubelet_root: &Path,
    log_root: &Path,
    cgroup_root: &Path,
) -> Result<(), RootError> {
    let given_cgroup_root = cgroup_root;
    let kubelet_root = directory("kubelet-root", kubelet_root, "/var/lib/kubelet")?;
    let log_root = directory("log-root", log_root, "/var/log/pods")?;
    let cgroup_root = directory("cgroup-root", cgroup_root, "/sys/fs/cgroup")?;
    match has_cgroup_fs(&cgroup_root) {
        Ok(true) => {}
        Ok(false) => return Err(RootError::NoCgroupFs(given_cgroup_root.to_path_buf())),
        Err(source) => {
            return Err(RootError::Io {
                flag: "cgroup-root",
                path: given_cgroup_root.to_path_buf(),
                source,
            });
        }
    }
    let pods = kubelet_root.join("pods");
    let pods = std::fs::canonicalize(&pods).unwrap_or(pods);
    if log_root.starts_with(&pods) || pods.starts_with(&log_root) {
        return Err(RootError::Overlap { log_root, pods });
    }
    Ok(())
}
