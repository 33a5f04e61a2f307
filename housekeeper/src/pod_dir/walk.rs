//! The fd-based walk behind pod dir and log dir removal: `openat(O_NOFOLLOW|O_DIRECTORY)` for every
//! directory, `statx(AT_SYMLINK_NOFOLLOW)` for every entry, `unlinkat` relative to the parent fd.
//!
//! The same walk runs twice: read-only (collecting every reason not to remove) and then removing,
//! where any reason — something that appeared since the first walk — stops it at once. Each entry is
//! checked against the walk's anchor (the root dir): same device, same mount id, not a mount root.
//! A directory is opened by name with `O_NOFOLLOW`, then its inode is compared with the one `statx`
//! saw, so an entry swapped for a symlink or another directory mid-walk is never followed.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::fd::{Meta, cstring, io, kind_name, list, stat_at};
use super::{PodDirError, RemovalReport};

/// How deep a walk may go; kubelet's trees are a handful of levels, and each level holds one fd.
const MAX_DEPTH: usize = 128;
/// Reasons kept per walk; the rest are only counted.
const MAX_REASONS: usize = 32;
/// kubelet's CSI plugin dir name under `volumes/`.
const CSI_PLUGIN: &[u8] = b"kubernetes.io~csi";
/// The CSI metadata file left behind after a hard reboot (kubernetes #105536).
const CSI_VOL_DATA: &[u8] = b"vol_data.json";
/// The CSI mount point dir inside a volume dir.
const CSI_MOUNT: &[u8] = b"mount";

/// What the root of the walk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// A pod dir: `volumes/` and `volume-subpaths/` are rmdir-only, the rest removed on one fs.
    PodDir,
    /// Any other tree (a log dir): everything removed on one fs.
    Tree,
}

/// The rules in force inside a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    /// Remove everything (one fs, links as links).
    Plain,
    /// `volumes/` itself: its children are plugin dirs.
    VolumesTop,
    /// Below `volumes/<plugin>` or in `volume-subpaths/`: empty dirs only.
    RmdirOnly,
    /// `volumes/kubernetes.io~csi`: its children are CSI volume dirs.
    CsiPlugin,
    /// `volumes/kubernetes.io~csi/<vol>`: rmdir-only, but `vol_data.json` may go with an empty `mount/`.
    CsiVol,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode_ {
    Assess,
    Remove,
}

/// One walk over a tree (see the module docs).
pub(crate) struct Walk {
    root: PathBuf,
    mode: Mode_,
    anchor: Option<Meta>,
    reasons: Vec<String>,
    more: usize,
    removed: u64,
    csi: Vec<PathBuf>,
}

impl Walk {
    /// A read-only walk that collects reasons.
    pub(crate) fn assess(root: &Path) -> Self {
        Self::new(root, Mode_::Assess)
    }

    /// A removing walk that stops at the first reason.
    pub(crate) fn remove(root: &Path) -> Self {
        Self::new(root, Mode_::Remove)
    }

    fn new(root: &Path, mode: Mode_) -> Self {
        Walk {
            root: root.to_path_buf(),
            mode,
            anchor: None,
            reasons: Vec::new(),
            more: 0,
            removed: 0,
            csi: Vec::new(),
        }
    }

    /// Reasons found (capped, with a count of the rest).
    pub(crate) fn into_reasons(mut self) -> Vec<String> {
        if self.more > 0 {
            self.reasons.push(format!("... and {} more", self.more));
        }
        self.reasons
    }

    /// What was removed.
    pub(crate) fn into_report(self) -> RemovalReport {
        RemovalReport {
            removed_entries: self.removed,
            removed_csi_vol_data: self.csi,
        }
    }

    /// Walks (and in remove mode removes) the root. A root that does not exist is done.
    pub(crate) fn run(&mut self, scope: Scope) -> Result<(), PodDirError> {
        let root = self.root.clone();
        let (Some(parent), Some(name)) = (root.parent(), root.file_name()) else {
            return Err(PodDirError::BadPath(root));
        };
        if name == ".." || parent.as_os_str().is_empty() {
            return Err(PodDirError::BadPath(root));
        }
        let parent_fd = match rustix::fs::open(
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(io("open", parent, e)),
        };
        let name = cstring(name.as_bytes(), &root)?;
        let Some(meta) = stat_at(&parent_fd, &name, &root)? else {
            return Ok(());
        };
        if meta.kind != FileType::Directory {
            // A symlink (or file) where the dir should be: never followed, never removed here.
            return self.refuse(&root, "is not a directory");
        }
        if meta.mount_root {
            return self.refuse(&root, "is a mount point");
        }
        let Some(fd) = self.open_dir(&parent_fd, &name, &meta, &root)? else {
            return Ok(());
        };
        self.anchor = Some(meta);
        let ctx = match scope {
            Scope::PodDir => None,
            Scope::Tree => Some(Ctx::Plain),
        };
        self.contents(&fd, &root, ctx, 0)?;
        drop(fd);
        self.rmdir(&parent_fd, &name, &root)
    }

    /// Handles every entry of an open directory. `ctx == None` is the pod dir itself.
    fn contents(
        &mut self,
        fd: &OwnedFd,
        path: &Path,
        ctx: Option<Ctx>,
        depth: usize,
    ) -> Result<(), PodDirError> {
        if depth > MAX_DEPTH {
            return Err(PodDirError::TooDeep(path.to_path_buf()));
        }
        let mut names = list(fd, path)?;
        if ctx.is_none() {
            // kubelet's order: volumes, then subpaths, then the rest.
            let rank = |n: &CString| match n.as_bytes() {
                b"volumes" => 0,
                b"volume-subpaths" => 1,
                _ => 2,
            };
            names.sort_by_key(rank);
        } else if ctx == Some(Ctx::CsiVol) {
            // `mount/` before `vol_data.json`: the metadata goes only after the mount dir did.
            names.sort_by_key(|n| n.as_bytes() != CSI_MOUNT);
        }
        let csi_vol_data_ok =
            ctx == Some(Ctx::CsiVol) && self.csi_leftover_only(fd, &names, path)?;
        for name in names {
            let child = path.join(OsStr::from_bytes(name.as_bytes()));
            let Some(meta) = stat_at(fd, &name, &child)? else {
                continue;
            };
            if !self.same_fs(&meta, &child)? {
                continue;
            }
            let child_ctx = match (ctx, name.as_bytes()) {
                (None, b"volumes") => Ctx::VolumesTop,
                (None, b"volume-subpaths") => Ctx::RmdirOnly,
                (None, _) => Ctx::Plain,
                (Some(Ctx::VolumesTop), CSI_PLUGIN) => Ctx::CsiPlugin,
                (Some(Ctx::CsiPlugin), _) => Ctx::CsiVol,
                (Some(Ctx::Plain), _) => Ctx::Plain,
                (Some(_), _) => Ctx::RmdirOnly,
            };
            if meta.kind == FileType::Directory {
                let Some(child_fd) = self.open_dir(fd, &name, &meta, &child)? else {
                    continue;
                };
                self.contents(&child_fd, &child, Some(child_ctx), depth + 1)?;
                drop(child_fd);
                self.rmdir(fd, &name, &child)?;
                continue;
            }
            match ctx {
                None if matches!(name.as_bytes(), b"volumes" | b"volume-subpaths") => {
                    self.refuse(&child, "is not a directory")?;
                }
                None | Some(Ctx::Plain) => {
                    self.unlink(fd, &name, &child)?;
                }
                Some(Ctx::CsiVol) if csi_vol_data_ok && name.as_bytes() == CSI_VOL_DATA => {
                    if self.unlink(fd, &name, &child)? {
                        self.csi.push(child);
                    }
                }
                Some(_) => self.refuse(
                    &child,
                    &format!("is a {} in a volume directory", kind_name(meta.kind)),
                )?,
            }
        }
        Ok(())
    }

    /// Whether a CSI volume dir holds only kubelet's leftovers: a regular `vol_data.json`, and at most
    /// an empty `mount/` dir (its mount-ness is checked when the walk reaches it).
    fn csi_leftover_only(
        &mut self,
        fd: &OwnedFd,
        names: &[CString],
        path: &Path,
    ) -> Result<bool, PodDirError> {
        let mut has_vol_data = false;
        for name in names {
            let child = path.join(OsStr::from_bytes(name.as_bytes()));
            let Some(meta) = stat_at(fd, name, &child)? else {
                continue;
            };
            match name.as_bytes() {
                CSI_VOL_DATA if meta.kind == FileType::RegularFile => has_vol_data = true,
                CSI_MOUNT if meta.kind == FileType::Directory && !meta.mount_root => {
                    let Some(mount_fd) = self.open_dir(fd, name, &meta, &child)? else {
                        continue;
                    };
                    if !list(&mount_fd, &child)?.is_empty() {
                        return Ok(false);
                    }
                }
                _ => return Ok(false),
            }
        }
        Ok(has_vol_data)
    }

    /// Checks an entry against the anchor; a mismatch is a reason (and `false`: don't descend).
    fn same_fs(&mut self, meta: &Meta, path: &Path) -> Result<bool, PodDirError> {
        let Some(anchor) = self.anchor else {
            return Ok(false);
        };
        let reason = if meta.mount_root {
            "is a mount point"
        } else if meta.dev != anchor.dev {
            "is on another filesystem"
        } else if matches!((meta.mnt_id, anchor.mnt_id), (Some(a), Some(b)) if a != b) {
            "is on another mount"
        } else {
            return Ok(true);
        };
        self.refuse(path, reason)?;
        Ok(false)
    }

    /// Opens a child dir without following a symlink and checks it is the inode `statx` saw.
    fn open_dir(
        &mut self,
        parent: &OwnedFd,
        name: &CStr,
        meta: &Meta,
        path: &Path,
    ) -> Result<Option<OwnedFd>, PodDirError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => {
                self.refuse(path, "was replaced by a non-directory during the walk")?;
                return Ok(None);
            }
            Err(e) => return Err(io("open", path, e)),
        };
        let Some(now) = stat_at(&fd, c"", path)? else {
            return Ok(None);
        };
        if now.ino != meta.ino || now.dev != meta.dev {
            self.refuse(path, "was replaced during the walk")?;
            return Ok(None);
        }
        Ok(Some(fd))
    }

    fn unlink(&mut self, parent: &OwnedFd, name: &CStr, path: &Path) -> Result<bool, PodDirError> {
        self.remove_at(parent, name, path, AtFlags::empty())
    }

    fn rmdir(&mut self, parent: &OwnedFd, name: &CStr, path: &Path) -> Result<(), PodDirError> {
        self.remove_at(parent, name, path, AtFlags::REMOVEDIR)
            .map(|_| ())
    }

    fn remove_at(
        &mut self,
        parent: &OwnedFd,
        name: &CStr,
        path: &Path,
        flags: AtFlags,
    ) -> Result<bool, PodDirError> {
        if self.mode == Mode_::Assess {
            return Ok(false);
        }
        match rustix::fs::unlinkat(parent, name, flags) {
            Ok(()) => {
                self.removed += 1;
                Ok(true)
            }
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(io(
                if flags.is_empty() { "unlink" } else { "rmdir" },
                path,
                e,
            )),
        }
    }

    /// Records a reason (assess) or stops the walk (remove).
    fn refuse(&mut self, path: &Path, reason: &str) -> Result<(), PodDirError> {
        match self.mode {
            Mode_::Remove => Err(PodDirError::Changed {
                path: path.to_path_buf(),
                reason: reason.to_owned(),
            }),
            Mode_::Assess => {
                if self.reasons.len() < MAX_REASONS {
                    self.reasons.push(format!("{} {reason}", path.display()));
                } else {
                    self.more += 1;
                }
                Ok(())
            }
        }
    }
}
