//! The relay's sockets on a socket pair: every byte arrives, in order, whether writes go
//! through at once or must wait for a slow reader, and the wait for room is dropped again.

use std::time::Duration;

use super::*;

fn pair() -> (Socket, Socket) {
    let (a, b) = tokio::net::UnixStream::pair().expect("socket pair");
    (
        Socket::new(a).expect("register a"),
        Socket::new(b).expect("register b"),
    )
}

/// Reads `b` to its end, pausing `pause` after each read (a slow reader: room comes back a
/// little at a time).
async fn read_to_end(b: Socket, pause: Option<Duration>) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0; 64 << 10];
    loop {
        let n = b.read(&mut buf).await.expect("read");
        if n == 0 {
            return got;
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
    }
}

/// Writes without waiting until the socket takes no more; how much it took.
fn fill(w: &Writer) -> usize {
    let block = vec![7u8; 64 << 10];
    let mut filled = 0;
    while let Ok(n) = w.try_write(&block) {
        assert!(n > 0 && filled < 64 << 20, "the socket never filled");
        filled += n;
    }
    filled
}

#[tokio::test]
async fn a_write_larger_than_the_socket_holds_waits_for_the_reader_and_loses_nothing() {
    let (a, b) = pair();
    let mut w = Writer::new(Arc::new(a));
    // Far more than a Unix socket buffers: the writer must wait for room many times.
    let sent: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    let reader = tokio::spawn(read_to_end(b, Some(Duration::from_micros(200))));
    // As the relay writes a chunk: what the socket takes at once, then the rest.
    let first = w.try_write(&sent).expect("the empty socket takes some");
    assert!(first < sent.len(), "the socket took it all at once");
    w.write_rest(&sent[first..]).await.expect("write");
    assert!(w.armed.is_some(), "the write had to wait for room");
    w.shutdown().expect("shutdown");
    let got = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the reader saw the end")
        .expect("reader task");
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "the bytes arrived changed or out of order");
}

#[tokio::test]
async fn the_wait_for_room_is_dropped_once_a_write_goes_through_and_taken_up_again() {
    let (a, b) = pair();
    let mut w = Writer::new(Arc::new(a));
    let filled = fill(&w);
    let draining = tokio::spawn(async move {
        let mut buf = vec![0; 64 << 10];
        let mut total = 0;
        while total < filled {
            total += b.read(&mut buf).await.expect("read");
        }
        b
    });
    w.write_all(b"after the wait").await.expect("write");
    assert!(w.armed.is_some(), "the write waited for room");
    let b = draining.await.expect("drain");
    let mut buf = [0u8; 64];
    let n = b.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..n], b"after the wait");

    w.disarm();
    assert!(w.armed.is_none() && w.spare.is_some());
    // A later wait takes the kept descriptor up again, and still loses nothing.
    let filled = fill(&w);
    let reader = tokio::spawn(read_to_end(b, None));
    w.write_all(b"the end").await.expect("write");
    assert!(w.armed.is_some() && w.spare.is_none());
    w.shutdown().expect("shutdown");
    let got = reader.await.expect("reader");
    assert_eq!(got.len(), filled + b"the end".len());
    assert!(got.ends_with(b"the end"));
}

#[tokio::test]
async fn the_end_of_the_peer_reads_as_zero_bytes() {
    let (a, b) = pair();
    Writer::new(Arc::new(a)).shutdown().expect("shutdown");
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), b.read(&mut buf))
        .await
        .expect("no wait past the end")
        .expect("read");
    assert_eq!(n, 0);
}

/// The events each epoll instance of this process waits for on descriptor `fd` of the
/// socket with inode `ino` (`/proc/self/fdinfo` of every epoll descriptor lists
/// `tfd: <fd> events: <mask> ... ino:<inode>`; the inode tells this socket from a closed one
/// whose number another test's runtime still lists).
fn epoll_masks(fd: i32, ino: u64) -> Vec<u32> {
    let mut masks = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")
        .expect("fd dir")
        .flatten()
    {
        let is_epoll = std::fs::read_link(entry.path())
            .is_ok_and(|t| t.to_string_lossy() == "anon_inode:[eventpoll]");
        let info = format!("/proc/self/fdinfo/{}", entry.file_name().to_string_lossy());
        let Some(text) = is_epoll
            .then(|| std::fs::read_to_string(info).ok())
            .flatten()
        else {
            continue;
        };
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let field = |name: &str| {
                words
                    .iter()
                    .position(|w| *w == name)
                    .and_then(|i| words.get(i + 1))
                    .copied()
            };
            let this = words.first() == Some(&"tfd:")
                && field("tfd:") == Some(&*fd.to_string())
                && words.iter().any(|w| *w == format!("ino:{ino:x}"));
            if let Some(mask) = field("events:").filter(|_| this) {
                masks.push(u32::from_str_radix(mask, 16).expect("hex mask"));
            }
        }
    }
    masks
}

#[tokio::test]
async fn a_socket_waits_for_reading_alone_and_for_room_only_while_a_write_waits() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    const EPOLLIN: u32 = 0x1;
    const EPOLLOUT: u32 = 0x4;
    let (a, b) = pair();
    let fd = a.io.get_ref().as_raw_fd();
    let ino = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .expect("socket inode")
        .ino();
    let masks = epoll_masks(fd, ino);
    // (An epoll instance may be listed under two descriptors: tokio keeps a copy.)
    assert!(!masks.is_empty(), "the socket is registered");
    assert!(
        masks.iter().all(|m| m & EPOLLIN != 0 && m & EPOLLOUT == 0),
        "{masks:x?}"
    );

    let mut w = Writer::new(Arc::new(a));
    let filled = fill(&w);
    let reader = tokio::spawn(read_to_end(b, None));
    w.write_all(b"x").await.expect("write");
    let dup = w.armed.as_ref().expect("armed").get_ref().as_raw_fd();
    let armed = epoll_masks(dup, ino);
    assert!(
        !armed.is_empty(),
        "the second descriptor is registered while a write waits"
    );
    assert!(
        armed.iter().all(|m| m & EPOLLOUT != 0 && m & EPOLLIN == 0),
        "{armed:x?}"
    );
    w.disarm();
    assert!(
        epoll_masks(dup, ino).is_empty(),
        "the wait for room was dropped"
    );
    w.shutdown().expect("shutdown");
    assert_eq!(reader.await.expect("reader").len(), filled + 1);
}
