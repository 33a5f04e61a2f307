//! Reading a file the container controls from a process that still holds the prober's
//! privileges: resolved inside the container's root only (`openat2` with `RESOLVE_IN_ROOT`,
//! no magic link such as `/proc/<pid>/root` that would lead into another process's root, no
//! crossing of a mount), never an open that can block (`O_NONBLOCK`: a FIFO opens at once),
//! never a controlling terminal, only a regular file, and only its first bytes up to a limit.

use std::fs::File;
use std::io::{self, Read};

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};

/// Bytes reserved before the first read.
const READ_AHEAD: usize = 4 << 10;

/// The first `limit` bytes of the regular file at `path`; `None` when it is something else (a
/// FIFO, a device, a directory, a socket).
pub(super) fn read(path: &str, limit: usize) -> io::Result<Option<Vec<u8>>> {
    let root = nix::fcntl::open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_IN_ROOT
                | ResolveFlag::RESOLVE_NO_MAGICLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        );
    let file = File::from(nix::fcntl::openat2(&root, path, how)?);
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    // Room for a usual file up front: one read instead of a doubling series of small ones.
    let mut out = Vec::with_capacity(limit.min(READ_AHEAD));
    file.take(limit as u64).read_to_end(&mut out)?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_not_read_and_does_not_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("passwd");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        assert_eq!(read(fifo.to_str().expect("utf-8"), 10).expect("read"), None);
    }

    #[test]
    fn a_regular_file_is_read_up_to_the_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("passwd");
        std::fs::write(&f, b"root:x:0:0:root:/root:/bin/sh\n").expect("write");
        let path = f.to_str().expect("utf-8");
        assert_eq!(read(path, 4).expect("read"), Some(b"root".to_vec()));
    }

    #[test]
    fn a_magic_link_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("passwd");
        std::fs::write(&f, b"root:x:0:0:root:/root:/bin/sh\n").expect("write");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(format!("/proc/self/root{}", f.display()), &link)
            .expect("symlink");
        assert!(read(link.to_str().expect("utf-8"), 4).is_err());
    }
}
