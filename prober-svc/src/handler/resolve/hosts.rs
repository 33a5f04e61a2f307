//! The node's `/etc/hosts`, read under a root path, kept parsed and read again when its
//! modification time (or size) changes: a name it lists is answered without the lookup pool.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::SystemTime;

use parking_lot::Mutex;

/// `<root>/etc/hosts`, cached.
#[derive(Debug)]
pub(crate) struct HostsFile {
    path: PathBuf,
    cache: Mutex<Cached>,
}

#[derive(Debug, Default)]
struct Cached {
    /// Modification time and size of the file parsed; `None` before the first read or while
    /// the file is missing.
    stamp: Option<(SystemTime, u64)>,
    names: HashMap<Box<str>, Vec<IpAddr>>,
}

/// The most of the file read: a hosts file is a few lines, and the cache must not grow with
/// what a file could hold.
const MAX_BYTES: u64 = 1 << 20;

impl HostsFile {
    /// The hosts file under `root`.
    pub(crate) fn new(root: &std::path::Path) -> Self {
        Self {
            path: root.join("etc/hosts"),
            cache: Mutex::new(Cached::default()),
        }
    }

    /// The addresses the file gives `name` (in the file's order), if it lists it. Names are
    /// compared case-blind and without a trailing dot, as Go's and glibc's readers do.
    pub(crate) fn lookup(&self, name: &str) -> Option<Vec<IpAddr>> {
        let key = normalize(name);
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        let mut cache = self.cache.lock();
        if cache.stamp != stamp {
            cache.names = match stamp {
                Some(_) => read(&self.path),
                None => HashMap::new(),
            };
            cache.stamp = stamp;
        }
        cache.names.get(key.as_str()).cloned()
    }
}

fn normalize(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// The file's names and their addresses; an unreadable file lists nothing (the pool's
/// `getaddrinfo` reads it again anyway).
fn read(path: &std::path::Path) -> HashMap<Box<str>, Vec<IpAddr>> {
    use std::io::Read;
    let mut text = String::new();
    let read = std::fs::File::open(path).and_then(|f| f.take(MAX_BYTES).read_to_string(&mut text));
    if read.is_err() {
        return HashMap::new();
    }
    parse(&text)
}

/// `hosts(5)`: an address, then its names; `#` starts a comment; lines whose address does not
/// parse are skipped.
pub(crate) fn parse(text: &str) -> HashMap<Box<str>, Vec<IpAddr>> {
    let mut names: HashMap<Box<str>, Vec<IpAddr>> = HashMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut fields = line.split_ascii_whitespace();
        let Some(Ok(ip)) = fields.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        for name in fields {
            let ips = names.entry(normalize(name).into()).or_default();
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comments_aliases_and_case() {
        let names = parse(
            "# comment\n127.0.0.1 localhost\n10.0.0.7  Web.Local web # alias\n\
             fd00::7 web.local\nnot-an-ip bad\n",
        );
        let web: Vec<IpAddr> = vec![
            "10.0.0.7".parse().expect("ip"),
            "fd00::7".parse().expect("ip"),
        ];
        assert_eq!(names.get("web.local"), Some(&web));
        assert_eq!(names.get("web").map(Vec::len), Some(1));
        assert!(!names.contains_key("bad"));
    }

    #[test]
    fn reads_again_when_the_file_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("etc")).expect("mkdir");
        let hosts = HostsFile::new(dir.path());
        assert_eq!(hosts.lookup("a.test"), None, "no file lists nothing");
        std::fs::write(dir.path().join("etc/hosts"), "10.1.1.1 a.test\n").expect("write");
        assert_eq!(
            hosts.lookup("A.test."),
            Some(vec!["10.1.1.1".parse().expect("ip")])
        );
        // A different size is a change even within the file system's time granularity.
        std::fs::write(dir.path().join("etc/hosts"), "10.2.2.22 a.test\n").expect("write");
        assert_eq!(
            hosts.lookup("a.test"),
            Some(vec!["10.2.2.22".parse().expect("ip")])
        );
    }
}
