//! The prober's own memory limit, which sizes the budget: its cgroup's `memory.max` (v2), else
//! `memory.limit_in_bytes` (v1), as `/proc/self/cgroup` places it. Read under a root path.

use std::path::Path;

/// A v1 limit at or above this is "no limit" (the kernel's unlimited value is near `i64::MAX`,
/// rounded down to the page size).
const V1_UNLIMITED: u64 = 1 << 60;

/// The memory limit of the process's cgroup under `root` (`/` on a node), if it has one.
pub fn memory_limit(root: &Path) -> Option<u64> {
    let cgroups = std::fs::read_to_string(root.join("proc/self/cgroup")).ok()?;
    let mut v1 = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            let file = root.join("sys/fs/cgroup").join(rel).join("memory.max");
            if let Some(limit) = read_limit(&file) {
                return limit;
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(rel.to_owned());
        }
    }
    let rel = v1?;
    let file = root
        .join("sys/fs/cgroup/memory")
        .join(rel)
        .join("memory.limit_in_bytes");
    read_limit(&file).flatten()
}

/// `Some(None)`: the file says there is no limit; `None`: it could not be read.
fn read_limit(file: &Path) -> Option<Option<u64>> {
    let text = std::fs::read_to_string(file).ok()?;
    let text = text.trim();
    if text == "max" {
        return Some(None);
    }
    let n: u64 = text.parse().ok()?;
    Some((n < V1_UNLIMITED).then_some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    #[test]
    fn v2_then_v1_then_none() {
        let root = tempfile::tempdir().expect("tmp");
        let r = root.path();
        write(r, "proc/self/cgroup", "0::/kubepods/pod1/c1\n");
        write(
            r,
            "sys/fs/cgroup/kubepods/pod1/c1/memory.max",
            "536870912\n",
        );
        assert_eq!(memory_limit(r), Some(512 << 20));
        write(r, "sys/fs/cgroup/kubepods/pod1/c1/memory.max", "max\n");
        assert_eq!(memory_limit(r), None);

        let root = tempfile::tempdir().expect("tmp");
        let r = root.path();
        write(
            r,
            "proc/self/cgroup",
            "5:cpu,cpuacct:/x\n4:memory:/podward\n0::/\n",
        );
        write(
            r,
            "sys/fs/cgroup/memory/podward/memory.limit_in_bytes",
            "268435456\n",
        );
        assert_eq!(memory_limit(r), Some(256 << 20));
        write(
            r,
            "sys/fs/cgroup/memory/podward/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        assert_eq!(memory_limit(r), None);
        assert_eq!(memory_limit(&r.join("nothing")), None);
    }
}
