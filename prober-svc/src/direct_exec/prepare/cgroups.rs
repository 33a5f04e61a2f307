//! Which cgroups the helper joins: the container init's `/proc/<pid>/cgroup` lines, each found
//! under the prober's own cgroup mounts (its `/proc/self/mountinfo`), so that the helper needs
//! no parsing and names every file by a path the prober resolved.

use std::path::Path;

use podward_api::mountinfo::unescape_text;

use crate::direct_exec::plan::Cgroups;

/// A cgroup of the container's init that the prober cannot reach (an unreadable line, a
/// hierarchy the prober has not mounted, a prober in a cgroup namespace of its own).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(String);

/// Each line of `/proc/<pid>/cgroup` under the prober's mounts: a v1 hierarchy's `tasks` file,
/// the v2 hierarchy's directory.
///
/// Why `tasks` on v1: moving the writer itself, one thread, is the one migration the kernel
/// makes without taking the global threadgroup lock for writing, and taking that lock waits for
/// an RCU grace period whenever it was not taken just before (the slowest stage of a direct exec
/// by far). The helper is single-threaded (`assert_single_threaded` ran before the plan is
/// read, and it starts no thread), so its one thread is the whole process: the same move as a
/// write to `cgroup.procs`. v2 has no such file across domains (`cgroup.threads` moves a thread
/// only within its domain): there the reaper is created in the cgroup instead (`clone3` with
/// `CLONE_INTO_CGROUP`), which takes that lock only for reading, as every fork does.
pub(crate) fn resolve(cgroup: &str, mountinfo: &str) -> Result<Cgroups, Unreachable> {
    let mounts: Vec<(String, String, String, String)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            Some((
                post.first()?.to_string(),
                unescape_text(pre.get(3)?),
                unescape_text(pre.get(4)?),
                post.get(2).copied().unwrap_or("").to_owned(),
            ))
        })
        .filter(|(fs, ..)| fs == "cgroup" || fs == "cgroup2")
        .collect();
    let mut out = Cgroups::default();
    for line in cgroup.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            return Err(Unreachable(format!("unreadable line {line:?}")));
        };
        if path.starts_with("/..") {
            return Err(Unreachable(
                "the prober is not in the host's cgroup namespace".to_owned(),
            ));
        }
        let wanted: Vec<&str> = controllers.split(',').filter(|c| !c.is_empty()).collect();
        let found = mounts.iter().find(|(fs, root, _, opts)| {
            let under = path == root || root == "/" || path.starts_with(&format!("{root}/"));
            under
                && if wanted.is_empty() {
                    fs == "cgroup2"
                } else {
                    fs == "cgroup" && wanted.iter().all(|w| opts.split(',').any(|o| o == *w))
                }
        });
        let Some((fs, root, mountpoint, _)) = found else {
            return Err(Unreachable(format!(
                "hierarchy {:?} is not mounted in the prober",
                if controllers.is_empty() {
                    "cgroup2"
                } else {
                    controllers
                }
            )));
        };
        let rel = path
            .strip_prefix(root.as_str())
            .unwrap_or(path)
            .trim_start_matches('/');
        let dir = Path::new(mountpoint).join(rel);
        if fs == "cgroup2" {
            out.v2_dir = Some(dir);
        } else {
            if wanted.contains(&"freezer") {
                out.v1_freezer = Some(dir.clone());
            }
            out.v1_tasks.push(dir.join("tasks"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn cgroup_lines_map_to_v1_tasks_files_and_the_v2_directory() {
        let cgroup = "9:name=systemd:/pod/c1\n4:memory:/pod/c1\n3:freezer:/pod/c1\n1:cpu,cpuacct:/pod/c1\n0::/pod/c1\n";
        let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        let got = resolve(cgroup, mountinfo).expect("resolved");
        let want = Cgroups {
            v1_tasks: [
                "/sys/fs/cgroup/systemd/pod/c1/tasks",
                "/sys/fs/cgroup/memory/pod/c1/tasks",
                "/sys/fs/cgroup/freezer/pod/c1/tasks",
                "/sys/fs/cgroup/cpu,cpuacct/pod/c1/tasks",
            ]
            .iter()
            .map(PathBuf::from)
            .collect(),
            v2_dir: Some(PathBuf::from("/sys/fs/cgroup/unified/pod/c1")),
            v1_freezer: Some(PathBuf::from("/sys/fs/cgroup/freezer/pod/c1")),
        };
        assert_eq!(got, want);
    }

    #[test]
    fn mountinfo_escapes_are_undone_and_a_stray_backslash_is_kept() {
        assert_eq!(unescape_text(r"/a\040b"), "/a b");
        // A backslash before a multi-byte character: kept as it is, no panic.
        assert_eq!(unescape_text("/a\\\u{e9}\u{e9}"), "/a\\\u{e9}\u{e9}");
        assert_eq!(unescape_text("/a\\04"), "/a\\04");
    }

    #[test]
    fn a_foreign_cgroup_namespace_or_a_missing_hierarchy_is_refused() {
        let mountinfo = "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert!(matches!(
            resolve("0::/../../pod/c1\n", mountinfo),
            Err(Unreachable(_))
        ));
        assert!(matches!(
            resolve("4:memory:/pod/c1\n", mountinfo),
            Err(Unreachable(_))
        ));
        // A mount of a sub-tree (the prober's own cgroup namespace view) strips its root.
        let sub = "41 31 0:38 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            resolve("0::/kubepods/pod1/c1\n", sub).expect("resolved"),
            Cgroups {
                v1_tasks: Vec::new(),
                v2_dir: Some(PathBuf::from("/sys/fs/cgroup/pod1/c1")),
                v1_freezer: None,
            }
        );
    }
}
