//! The fd-based walk behind pod dir and log dir removal: `openat(O_NOFOLLOW|O_DIRECTORY)` for every
//! directory, `statx(AT_SYMLINK_NOFOLLOW)` for every entry, `unlinkat` relative to the parent fd.
//!
//! The same walk runs twice: read-only (it stops at the first reason not to remove: the verdict is
//! known then) and then removing, where any reason — something that appeared since the first walk —
//! stops it at once. Each entry is checked against the walk's anchor (the root dir): same device,
//! same mount id, not a mount root. A directory is opened by name with `O_NOFOLLOW`, then its inode
//! is compared with the one `statx` saw, so an entry swapped for a symlink or another directory
//! mid-walk is never followed.
//!
//! What a pod wrote into its volumes is hostile, so the walk is bounded whatever the tree holds:
//! directories are read as streams (`getdents` in chunks, never a whole directory in memory), one
//! fd and one chunk per level for at most [`MAX_DEPTH`] levels, and at most
//! [`WalkBounds::max_entries`] entries in [`WalkBounds::max_time`]. A walk that reaches a bound
//! before its verdict is known says so ([`Verdict::TooLarge`]); it never passes for clean.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::error::PodDirError;
use super::fd::{Entries, Meta, io, is_empty, kind_name, stat_at};
use super::shown::shown;

/// How much one walk of a pod (or log) dir may look at before it gives up on a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkBounds {
    /// Entries looked at (`statx`), in the whole tree.
    pub max_entries: u64,
    /// Time spent.
    pub max_time: Duration,
}

impl WalkBounds {
    /// kubelet's pod dirs hold tens of entries; a tree a hundred thousand entries large is not
    /// kubelet's, and a walk of it would cost the pass for every other orphan.
    pub const DEFAULT: WalkBounds = WalkBounds {
        max_entries: 100_000,
        max_time: Duration::from_secs(2),
    };
}

impl Default for WalkBounds {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What `remove_pod_dir` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemovalReport {
    /// Files, links and directories removed, the pod dir included.
    pub removed_entries: u64,
    /// CSI `vol_data.json` leftovers removed (kubernetes #105536).
    pub removed_csi_vol_data: Vec<PathBuf>,
}

/// How deep a walk may go; kubelet's trees are a handful of levels, and each level holds one fd
/// and one `getdents` chunk.
pub(crate) const MAX_DEPTH: usize = 128;
/// kubelet's CSI plugin dir name under `volumes/`.
const CSI_PLUGIN: &[u8] = b"kubernetes.io~csi";
/// The CSI metadata file left behind after a hard reboot (kubernetes #105536).
const CSI_VOL_DATA: &[u8] = b"vol_data.json";
/// The CSI mount point dir inside a volume dir.
const CSI_MOUNT: &[u8] = b"mount";
/// In a pod dir, kubelet's order: volumes, then subpaths, then the rest.
const POD_DIR_FIRST: &[&[u8]] = &[b"volumes", b"volume-subpaths"];
/// In a CSI volume dir, `mount/` before `vol_data.json`: the metadata goes only after the mount
/// dir did.
const CSI_VOL_FIRST: &[&[u8]] = &[CSI_MOUNT, CSI_VOL_DATA];

/// What the root of the walk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// A pod dir: `volumes/` and `volume-subpaths/` are rmdir-only, the rest removed on one fs.
    PodDir,
    /// Any other tree (a log dir): everything removed on one fs.
    Tree,
}

/// What a walk found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing stands in the way (assess), or everything was removed (remove).
    Clean,
    /// The first reason not to remove (assess only: a removing walk fails instead).
    Blocked(String),
    /// A bound was reached before the verdict was known (assess only).
    TooLarge {
        /// Entries looked at.
        entries: u64,
        /// Time spent.
        took: Duration,
    },
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
    /// `volumes/kubernetes.io~csi/<vol>`: rmdir-only, but `vol_data.json` may go with an empty
    /// `mount/`.
    CsiVol,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode_ {
    Assess,
    Remove,
}

/// Why a walk stopped early: its verdict is known, or it failed.
enum Halt {
    Verdict(Verdict),
    Failed(PodDirError),
}

impl From<PodDirError> for Halt {
    fn from(e: PodDirError) -> Self {
        Halt::Failed(e)
    }
}

/// One walk over a tree (see the module docs).
pub(crate) struct Walk {
    root: PathBuf,
    mode: Mode_,
    bounds: WalkBounds,
    started: Instant,
    entries: u64,
    anchor: Option<Meta>,
    removed: u64,
    csi: Vec<PathBuf>,
}

impl Walk {
    /// A read-only walk that stops at the first reason not to remove.
    pub(crate) fn assess(root: &Path, bounds: WalkBounds) -> Self {
        Self::new(root, Mode_::Assess, bounds)
    }

    /// A removing walk that stops (and fails) at the first reason.
    pub(crate) fn remove(root: &Path, bounds: WalkBounds) -> Self {
        Self::new(root, Mode_::Remove, bounds)
    }

    fn new(root: &Path, mode: Mode_, bounds: WalkBounds) -> Self {
        Walk {
            root: root.to_path_buf(),
            mode,
            bounds,
            started: Instant::now(),
            entries: 0,
            anchor: None,
            removed: 0,
            csi: Vec::new(),
        }
    }

    /// What was removed.
    pub(crate) fn into_report(self) -> RemovalReport {
        RemovalReport {
            removed_entries: self.removed,
            removed_csi_vol_data: self.csi,
        }
    }

    /// Walks (and in remove mode removes) the root. A root that does not exist is `Clean`.
    pub(crate) fn run(&mut self, scope: Scope) -> Result<Verdict, PodDirError> {
        self.started = Instant::now();
        match self.walk_root(scope) {
            Ok(()) => Ok(Verdict::Clean),
            Err(Halt::Verdict(v)) => Ok(v),
            Err(Halt::Failed(e)) => Err(e),
        }
    }

    fn walk_root(&mut self, scope: Scope) -> Result<(), Halt> {
        let root = self.root.clone();
        let (Some(parent), Some(name)) = (root.parent(), root.file_name()) else {
            return Err(PodDirError::BadPath(root).into());
        };
        if name == ".." || parent.as_os_str().is_empty() {
            return Err(PodDirError::BadPath(root).into());
        }
        let parent_fd = match rustix::fs::open(
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(io("open", parent, e).into()),
        };
        let name = CString::new(name.as_bytes()).map_err(|_| PodDirError::BadPath(root.clone()))?;
        let Some(meta) = stat_at(&parent_fd, &name, &root)? else {
            return Ok(());
        };
        if meta.kind != FileType::Directory {
            // A symlink (or file) where the dir should be: never followed, never removed here.
            return Err(self.refuse(&root, "is not a directory"));
        }
        if meta.mount_root {
            return Err(self.refuse(&root, "is a mount point"));
        }
        self.check_removable(&meta, &root)?;
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

    /// Handles every entry of an open directory, streaming it. `ctx == None` is the pod dir itself.
    fn contents(
        &mut self,
        fd: &OwnedFd,
        path: &Path,
        ctx: Option<Ctx>,
        depth: usize,
    ) -> Result<(), Halt> {
        if depth >= MAX_DEPTH {
            return Err(match self.mode {
                Mode_::Remove => PodDirError::TooDeep(path.to_path_buf()).into(),
                Mode_::Assess => self.refuse(
                    path,
                    &format!(
                        "is {MAX_DEPTH} levels down: the housekeeper walks no deeper (one open \
                         directory per level), so it never removes this tree"
                    ),
                ),
            });
        }
        let first: &[&[u8]] = match ctx {
            None => POD_DIR_FIRST,
            Some(Ctx::CsiVol) => CSI_VOL_FIRST,
            Some(_) => &[],
        };
        let csi_vol_data_ok = ctx == Some(Ctx::CsiVol) && self.csi_leftover_only(fd, path)?;
        for name in first {
            let name = CString::new(*name).map_err(|_| PodDirError::BadPath(path.to_path_buf()))?;
            self.entry(fd, &name, path, ctx, csi_vol_data_ok, depth)?;
        }
        let mut entries = Entries::open(fd, path)?;
        while let Some(name) = entries.next(path, |n| {
            (!first.contains(&n.to_bytes())).then(|| n.to_owned())
        }) {
            if let Some(name) = name? {
                self.entry(fd, &name, path, ctx, csi_vol_data_ok, depth)?;
            }
        }
        Ok(())
    }

    /// Handles one entry of the directory open at `fd`.
    fn entry(
        &mut self,
        fd: &OwnedFd,
        name: &CStr,
        path: &Path,
        ctx: Option<Ctx>,
        csi_vol_data_ok: bool,
        depth: usize,
    ) -> Result<(), Halt> {
        let child = path.join(OsStr::from_bytes(name.to_bytes()));
        let Some(meta) = stat_at(fd, name, &child)? else {
            return Ok(());
        };
        self.tick()?;
        self.same_fs(&meta, &child)?;
        self.check_removable(&meta, &child)?;
        let child_ctx = match (ctx, name.to_bytes()) {
            (None, b"volumes") => Ctx::VolumesTop,
            (None, b"volume-subpaths") => Ctx::RmdirOnly,
            (None, _) => Ctx::Plain,
            (Some(Ctx::VolumesTop), CSI_PLUGIN) => Ctx::CsiPlugin,
            (Some(Ctx::CsiPlugin), _) => Ctx::CsiVol,
            (Some(Ctx::Plain), _) => Ctx::Plain,
            (Some(_), _) => Ctx::RmdirOnly,
        };
        if meta.kind == FileType::Directory {
            let Some(child_fd) = self.open_dir(fd, name, &meta, &child)? else {
                return Ok(());
            };
            self.contents(&child_fd, &child, Some(child_ctx), depth + 1)?;
            drop(child_fd);
            return self.rmdir(fd, name, &child);
        }
        match ctx {
            None if POD_DIR_FIRST.contains(&name.to_bytes()) => {
                Err(self.refuse(&child, "is not a directory"))
            }
            None | Some(Ctx::Plain) => self.unlink(fd, name, &child).map(drop),
            Some(Ctx::CsiVol) if csi_vol_data_ok && name.to_bytes() == CSI_VOL_DATA => {
                if self.unlink(fd, name, &child)? {
                    self.csi.push(child);
                }
                Ok(())
            }
            Some(_) => Err(self.refuse(
                &child,
                &format!("is a {} in a volume directory", kind_name(meta.kind)),
            )),
        }
    }

    /// Counts one entry against the walk's bounds.
    fn tick(&mut self) -> Result<(), Halt> {
        self.entries += 1;
        let took = self.started.elapsed();
        if self.entries <= self.bounds.max_entries && took <= self.bounds.max_time {
            return Ok(());
        }
        Err(match self.mode {
            // The entry that reached the bound was not judged.
            Mode_::Assess => Halt::Verdict(Verdict::TooLarge {
                entries: self.entries - 1,
                took,
            }),
            Mode_::Remove => PodDirError::TooLarge {
                path: self.root.clone(),
                entries: self.entries,
            }
            .into(),
        })
    }

    /// Whether a CSI volume dir holds only kubelet's leftovers: a regular `vol_data.json`, and at
    /// most an empty `mount/` dir (its mount-ness is checked when the walk reaches it). Reads no
    /// further than the first entry that is neither.
    fn csi_leftover_only(&mut self, fd: &OwnedFd, path: &Path) -> Result<bool, Halt> {
        let mut has_vol_data = false;
        let mut entries = Entries::open(fd, path)?;
        while let Some(name) = entries.next(path, CStr::to_owned) {
            let name = name?;
            self.tick()?;
            let child = path.join(OsStr::from_bytes(name.to_bytes()));
            let Some(meta) = stat_at(fd, &name, &child)? else {
                continue;
            };
            match name.to_bytes() {
                CSI_VOL_DATA if meta.kind == FileType::RegularFile => has_vol_data = true,
                CSI_MOUNT if meta.kind == FileType::Directory && !meta.mount_root => {
                    let Some(mount_fd) = self.open_dir(fd, &name, &meta, &child)? else {
                        continue;
                    };
                    if !is_empty(&mount_fd, &child)? {
                        return Ok(false);
                    }
                }
                _ => return Ok(false),
            }
        }
        Ok(has_vol_data)
    }

    /// Checks an entry against the anchor; a mismatch stops the walk with its reason.
    fn same_fs(&mut self, meta: &Meta, path: &Path) -> Result<(), Halt> {
        let Some(anchor) = self.anchor else {
            return Ok(());
        };
        let reason = if meta.mount_root {
            "is a mount point"
        } else if meta.dev != anchor.dev {
            "is on another filesystem"
        } else if matches!((meta.mnt_id, anchor.mnt_id), (Some(a), Some(b)) if a != b) {
            "is on another mount"
        } else {
            return Ok(());
        };
        Err(self.refuse(path, reason))
    }

    /// An immutable or append-only entry can be neither unlinked nor emptied: removal would fail
    /// half-way, so it is a reason before anything goes.
    fn check_removable(&mut self, meta: &Meta, path: &Path) -> Result<(), Halt> {
        if meta.immutable {
            return Err(self.refuse(path, "is immutable (chattr +i): it cannot be removed"));
        }
        if meta.append_only {
            return Err(self.refuse(path, "is append-only (chattr +a): it cannot be removed"));
        }
        Ok(())
    }

    /// Opens a child dir without following a symlink and checks it is the inode `statx` saw.
    fn open_dir(
        &mut self,
        parent: &OwnedFd,
        name: &CStr,
        meta: &Meta,
        path: &Path,
    ) -> Result<Option<OwnedFd>, Halt> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(self.refuse(path, "was replaced by a non-directory during the walk"));
            }
            Err(e) => return Err(io("open", path, e).into()),
        };
        let Some(now) = stat_at(&fd, c"", path)? else {
            return Ok(None);
        };
        if now.ino != meta.ino || now.dev != meta.dev {
            return Err(self.refuse(path, "was replaced during the walk"));
        }
        Ok(Some(fd))
    }

    fn unlink(&mut self, parent: &OwnedFd, name: &CStr, path: &Path) -> Result<bool, Halt> {
        self.remove_at(parent, name, path, AtFlags::empty())
    }

    fn rmdir(&mut self, parent: &OwnedFd, name: &CStr, path: &Path) -> Result<(), Halt> {
        self.remove_at(parent, name, path, AtFlags::REMOVEDIR)
            .map(drop)
    }

    fn remove_at(
        &mut self,
        parent: &OwnedFd,
        name: &CStr,
        path: &Path,
        flags: AtFlags,
    ) -> Result<bool, Halt> {
        if self.mode == Mode_::Assess {
            return Ok(false);
        }
        match rustix::fs::unlinkat(parent, name, flags) {
            Ok(()) => {
                self.removed += 1;
                Ok(true)
            }
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(io(if flags.is_empty() { "unlink" } else { "rmdir" }, path, e).into()),
        }
    }

    /// The verdict (assess) or the failure (remove) for a reason not to remove `path`.
    fn refuse(&self, path: &Path, reason: &str) -> Halt {
        match self.mode {
            Mode_::Remove => PodDirError::Changed {
                path: path.to_path_buf(),
                reason: reason.to_owned(),
            }
            .into(),
            Mode_::Assess => Halt::Verdict(Verdict::Blocked(format!("{} {reason}", shown(path)))),
        }
    }
}
