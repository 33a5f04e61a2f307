//! Reading a file the container controls from a process that still holds the prober's
//! privileges: never an open that can block (`O_NONBLOCK`: a FIFO opens at once), never a
//! controlling terminal, only a regular file, and only its first bytes up to a limit. Symbolic
//! links are followed: the process is in the container's mount namespace and root, so they
//! resolve inside the container's root (every descriptor of the host is closed by then, so no
//! `/proc/self/fd` link leads out of it).

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;

/// Bytes reserved before the first read.
const READ_AHEAD: usize = 4 << 10;

/// The first `limit` bytes of the regular file at `path`; `None` when it is something else (a
/// FIFO, a device, a directory, a socket).
pub(super) fn read(path: &str, limit: usize) -> io::Result<Option<Vec<u8>>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
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
        assert_eq!(read("/dev/null", 4).expect("read"), None);
    }
}
