//! What a test node leaves on the machine, how to find it, and how to remove it.
//!
//! A node's footprint is: processes whose command line names its directory (containerd, its
//! shims, the registry) or that live in its cgroup parent (the pods' processes); mounts under
//! its directory (rootfs overlays, sandbox shm); its cgroup parent in every hierarchy (v1
//! controllers and v2); and the directory itself.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use podward_api::mountinfo::unescape_text;
use sha2::{Digest, Sha256};

/// Sysfs mount of the cgroup hierarchies (v1 controllers and, in hybrid mode, `unified`).
pub(crate) const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// libcni's result cache (not configurable through containerd's CRI config).
const CNI_CACHE_DIR: &str = "/var/lib/cni/results";

/// Where containerd 1.6 puts shim sockets (not configurable).
const SHIM_SOCKET_DIR: &str = "/run/containerd/s";

/// Everything a [`crate::node::TestNode`] can leave behind, so a test can check that nothing was.
#[derive(Debug, Clone)]
pub struct Footprint {
    /// The node's private directory.
    pub dir: PathBuf,
    /// The node's cgroup parent (`/podward-e2e-<id>`).
    pub cgroup_parent: String,
    /// The node's pod-network bridge interface, if it has one.
    pub bridge: Option<String>,
}

impl Footprint {
    /// The footprint of the node whose directory is `dir` (`<tmp>/podward-e2e-<id>`), e.g. one
    /// started by another process; `None` if `dir` is not a node directory name.
    pub fn of_node_dir(dir: &Path) -> Option<Footprint> {
        let name = dir.file_name()?.to_str()?;
        let id = name.strip_prefix("podward-e2e-")?;
        Some(Footprint::for_node(dir.to_path_buf(), id))
    }

    /// The footprint of the node with directory `dir` and id `id` (the dir name's suffix).
    pub(crate) fn for_node(dir: PathBuf, id: &str) -> Footprint {
        Footprint {
            dir,
            cgroup_parent: format!("/podward-e2e-{id}"),
            bridge: Some(bridge_name(id)),
        }
    }

    /// Everything of this footprint still present, one human-readable line each; empty when
    /// the node was cleaned up completely. Zombies are not counted (they hold no resource and
    /// are reaped by whoever is their parent).
    pub fn leaks(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (pid, cmd) in self.processes() {
            out.push(format!("process {pid}: {cmd}"));
        }
        for m in self.mounts() {
            out.push(format!("mount {}", m.display()));
        }
        for c in self.cgroup_dirs() {
            out.push(format!("cgroup {}", c.display()));
        }
        if let Some(b) = self.bridge.as_deref().filter(|b| bridge_exists(b)) {
            out.push(format!("network interface {b}"));
        }
        for f in self.cni_cache_files() {
            out.push(format!("CNI result cache {}", f.display()));
        }
        if self.dir.exists() {
            out.push(format!("directory {}", self.dir.display()));
        }
        out
    }

    /// Live (non-zombie) processes of this node: `(pid, command line)`.
    pub fn processes(&self) -> Vec<(i32, String)> {
        self.scan(false)
    }

    /// Live processes in the node's cgroup parent only (the pods' processes).
    pub fn pod_processes(&self) -> Vec<(i32, String)> {
        self.scan(true)
    }

    /// Live processes that are containerd shims of this node.
    pub fn shims(&self) -> Vec<(i32, String)> {
        self.scan(false)
            .into_iter()
            .filter(|(_, cmd)| cmd.contains("containerd-shim"))
            .collect()
    }

    /// The sockets of this node's live shims. containerd 1.6 puts them in a fixed directory,
    /// `/run/containerd/s/<sha256(address/namespace/id)>`, outside the node's directory; a shim
    /// that is killed (not shut down through containerd) leaves its socket there.
    pub fn shim_sockets(&self) -> Vec<PathBuf> {
        self.shims()
            .iter()
            .filter_map(|(_, cmd)| shim_socket(cmd))
            .collect()
    }

    fn scan(&self, cgroup_only: bool) -> Vec<(i32, String)> {
        let me = std::process::id() as i32;
        let dir = self.dir.to_string_lossy().into_owned();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if pid == me || is_zombie(pid) {
                continue;
            }
            let proc_dir = entry.path();
            let cmd = proc_cmdline(pid);
            let in_cgroup = std::fs::read_to_string(proc_dir.join("cgroup"))
                .map(|c| c.lines().any(|l| cgroup_line_under(l, &self.cgroup_parent)))
                .unwrap_or(false);
            if in_cgroup || (!cgroup_only && cmd.contains(&dir)) {
                out.push((pid, cmd));
            }
        }
        out
    }

    /// Mount points at or under the node's directory, deepest first.
    pub fn mounts(&self) -> Vec<PathBuf> {
        let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(|m| PathBuf::from(unescape_text(m)))
            .filter(|m| m.starts_with(&self.dir))
            .collect();
        out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        out.dedup();
        out
    }

    /// libcni's cached results for this node's pod network (`/var/lib/cni/results/<network>-…`),
    /// left behind when a sandbox is not torn down through CNI DEL.
    pub fn cni_cache_files(&self) -> Vec<PathBuf> {
        // Our network's results are named after it; the loopback network containerd adds to
        // every pod-network sandbox is named after the sandbox, which is the shim's id.
        let mut prefixes: Vec<String> = self
            .shims()
            .iter()
            .filter_map(|(_, cmd)| shim_flag(cmd, "-id"))
            .map(|id| format!("cni-loopback-{id}-"))
            .collect();
        if let Some(bridge) = &self.bridge {
            prefixes.push(format!("{}-", network_name(bridge)));
        }
        let Ok(entries) = std::fs::read_dir(CNI_CACHE_DIR) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                prefixes.iter().any(|p| name.starts_with(p.as_str()))
            })
            .map(|e| e.path())
            .collect()
    }

    /// The node's cgroup parent directory in every hierarchy where it exists.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        hierarchies()
            .into_iter()
            .map(|h| h.join(self.cgroup_parent.trim_start_matches('/')))
            .filter(|p| p.is_dir())
            .collect()
    }

    /// Removes everything in the footprint: kills its processes, unmounts, removes the cgroup
    /// trees and the directory. Best effort, logged; never panics.
    pub(crate) fn remove(&self) {
        // Named after live shims: collect before the shims are killed.
        let mut files = self.shim_sockets();
        files.extend(self.cni_cache_files());
        self.kill_processes(Duration::from_secs(10));
        for f in files {
            let _ = std::fs::remove_file(f);
        }
        self.unmount_all();
        self.remove_cgroups(Duration::from_secs(5));
        for f in self.cni_cache_files() {
            let _ = std::fs::remove_file(f);
        }
        if let Some(b) = self.bridge.as_deref().filter(|b| bridge_exists(b)) {
            let mut cmd = std::process::Command::new("ip");
            cmd.args(["link", "delete", b]);
            if let Err(e) = crate::binaries::run_checked(&mut cmd) {
                tracing::warn!(bridge = b, error = %e, "deleting pod bridge");
            }
        }
        let left = self.mounts();
        if left.is_empty() {
            if let Err(e) = std::fs::remove_dir_all(&self.dir)
                && self.dir.exists()
            {
                tracing::warn!(dir = %self.dir.display(), error = %e, "removing node dir");
            }
        } else {
            // Deleting through a mount could destroy files that are not ours.
            tracing::error!(dir = %self.dir.display(), mounts = ?left, "mounts remain; keeping node dir");
        }
    }

    /// SIGKILLs the footprint's processes until none is left or `timeout` passes.
    fn kill_processes(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let procs = self.processes();
            if procs.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                tracing::error!(?procs, "processes survive SIGKILL");
                return;
            }
            for (pid, _) in &procs {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lazily unmounts every mount under the directory, deepest first.
    fn unmount_all(&self) {
        for _round in 0..5 {
            let mounts = self.mounts();
            if mounts.is_empty() {
                return;
            }
            for m in mounts {
                if let Err(e) = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH) {
                    tracing::debug!(mount = %m.display(), error = %e, "umount");
                }
            }
        }
    }

    /// Removes the cgroup parent tree bottom-up in every hierarchy, retrying while busy (a
    /// killed process leaves its cgroup a moment later).
    fn remove_cgroups(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let dirs = self.cgroup_dirs();
            if dirs.is_empty() {
                return;
            }
            for d in &dirs {
                rmdir_tree(d);
            }
            if Instant::now() > deadline {
                tracing::error!(cgroups = ?self.cgroup_dirs(), "cgroups could not be removed");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The pod bridge of node `id`: `pwd` + 8 hex digits of a hash of the id (interface names are
/// at most 15 bytes and must not collide between nodes whose ids differ only in case).
pub(crate) fn bridge_name(id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    format!("pwd{}", hex::encode(&digest[..4]))
}

/// The CNI network name of the node whose bridge is `bridge`.
pub(crate) fn network_name(bridge: &str) -> String {
    format!("podward-e2e-{}", bridge.trim_start_matches("pwd"))
}

/// Whether network interface `name` exists in this network namespace.
fn bridge_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The socket path of a shim from its command line
/// (`containerd-shim-runc-v2 -namespace NS -id ID -address ADDR`).
fn shim_socket(cmdline: &str) -> Option<PathBuf> {
    let flag = |name| shim_flag(cmdline, name);
    let (ns, id, addr) = (flag("-namespace")?, flag("-id")?, flag("-address")?);
    let digest = Sha256::digest(format!("{addr}/{ns}/{id}").as_bytes());
    Some(Path::new(SHIM_SOCKET_DIR).join(hex::encode(digest)))
}

/// The value of `-name` in a shim's command line.
fn shim_flag<'a>(cmdline: &'a str, name: &str) -> Option<&'a str> {
    let mut args = cmdline.split(' ');
    args.by_ref().find(|a| *a == name)?;
    args.next()
}

/// Every cgroup hierarchy root: each v1 controller mount and the v2 mount (`unified`, or the
/// root itself on a pure v2 host).
pub(crate) fn hierarchies() -> Vec<PathBuf> {
    hierarchies_under(Path::new(CGROUP_ROOT))
}

/// Every cgroup hierarchy root under `root` (normally `/sys/fs/cgroup`).
pub(crate) fn hierarchies_under(root: &Path) -> Vec<PathBuf> {
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .flatten()
        // Skip symlinks such as cpu -> cpu,cpuacct: the target is listed itself.
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// rmdir every directory of a cgroup tree, children first (cgroup dirs only hold control
/// files, which rmdir removes with the directory).
fn rmdir_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Whether a `/proc/<pid>/cgroup` line (`id:controllers:/path`) is in `parent` or below.
fn cgroup_line_under(line: &str, parent: &str) -> bool {
    let Some(path) = line.splitn(3, ':').nth(2) else {
        return false;
    };
    path == parent || path.starts_with(&format!("{parent}/"))
}

/// `/proc/<pid>/cmdline` with its NULs as spaces, trimmed; empty when unreadable (the process
/// is gone, or a zombie).
pub fn proc_cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_lines_match_only_the_parent_and_below() {
        assert!(cgroup_line_under(
            "4:memory:/podward-e2e-ab/c1",
            "/podward-e2e-ab"
        ));
        assert!(cgroup_line_under("0::/podward-e2e-ab", "/podward-e2e-ab"));
        assert!(!cgroup_line_under(
            "4:memory:/podward-e2e-abc",
            "/podward-e2e-ab"
        ));
        assert!(!cgroup_line_under("garbage", "/podward-e2e-ab"));
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_text(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape_text(r"/tmp/x\"), r"/tmp/x\");
    }
}
