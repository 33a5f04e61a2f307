//! Large answers without the second copy: the side reader sees the bytes through
//! `recv(MSG_PEEK)` — one copy into the shim, which it needs anyway — and the bytes themselves go
//! socket → pipe → socket with `splice(2)`, which moves page references instead of copying (Linux
//! ≥ 6.5 for the pipe → unix socket half; older kernels copy there, as a write would).
//!
//! Three syscalls per chunk instead of two, so it pays only for large chunks: the pump switches to
//! it after a large read and back after a small one (see `pump.rs`), and small calls never see it.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::OwnedFd;

use bytes::BytesMut;
use rustix::net::RecvFlags;
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::UnixStream;

/// A pipe that moves one chunk at a time from one socket to another.
pub(super) struct Splicer {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

/// How a [`Splicer::forward`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Forwarded {
    /// All of the chunk reached the destination socket.
    All,
    /// The destination failed; `unread` bytes of the chunk are still in the source socket.
    DestinationGone { unread: usize },
    /// The kernel refused to splice these sockets; nothing was moved.
    Unsupported,
    /// The source socket failed.
    SourceFailed,
}

impl Splicer {
    /// A non-blocking pipe of (at least) `capacity` bytes.
    pub(super) fn new(capacity: usize) -> io::Result<Self> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let capacity = rustix::pipe::fcntl_setpipe_size(&write, capacity)?;
        Ok(Self {
            read,
            write,
            capacity,
        })
    }

    /// The most one chunk may hold.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Waits until `src` has bytes and copies up to `max` of them into `buf` without consuming
    /// them. `Ok(0)` is the end of the stream.
    pub(super) async fn peek(
        src: &UnixStream,
        buf: &mut BytesMut,
        max: usize,
    ) -> io::Result<usize> {
        buf.reserve(max);
        loop {
            src.readable().await?;
            let spare = buf.spare_capacity_mut();
            let take = spare.len().min(max);
            match src.try_io(Interest::READABLE, || {
                rustix::net::recv(
                    src,
                    &mut spare[..take],
                    RecvFlags::PEEK | RecvFlags::DONTWAIT,
                )
                .map(|((init, _), _)| init.len())
                .map_err(io::Error::from)
            }) {
                Ok(n) => {
                    // SAFETY: recv initialised the first `n` bytes of the spare capacity (rustix
                    // returns the initialised part), and `n <= take <= spare.len()`.
                    unsafe { buf.set_len(buf.len() + n) };
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves the next `n` bytes of `src` — already peeked, so already there — to `dst`.
    pub(super) async fn forward(
        &mut self,
        src: &UnixStream,
        dst: &UnixStream,
        n: usize,
    ) -> Forwarded {
        let mut left = n;
        let mut first = true;
        while left > 0 {
            // The pipe is empty here (each round drains it), and the bytes are in the socket:
            // this moves at least one byte without waiting.
            let moved = match rustix::pipe::splice(
                src,
                None,
                &self.write,
                None,
                left.min(self.capacity),
                SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
            ) {
                Ok(0) => return Forwarded::SourceFailed,
                Ok(m) => m,
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) if first => {
                    return Forwarded::Unsupported;
                }
                Err(_) => return Forwarded::SourceFailed,
            };
            first = false;
            left -= moved;
            if self.drain(dst, moved).await.is_err() {
                return Forwarded::DestinationGone { unread: left };
            }
        }
        Forwarded::All
    }

    /// Splices the `n` bytes in the pipe into `dst`, waiting for room as a write would.
    async fn drain(&self, dst: &UnixStream, mut n: usize) -> io::Result<()> {
        while n > 0 {
            dst.writable().await?;
            match dst.try_io(Interest::WRITABLE, || {
                rustix::pipe::splice(
                    &self.read,
                    None,
                    dst,
                    None,
                    n,
                    SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
                )
                .map_err(io::Error::from)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => n -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Consumes `n` bytes that are known to be in `src` (they were peeked), without keeping them.
pub(super) fn discard(src: &UnixStream, mut n: usize) -> io::Result<()> {
    let mut scratch = vec![0u8; n.min(64 << 10)];
    while n > 0 {
        let take = n.min(scratch.len());
        match rustix::net::recv(src, &mut scratch[..take], RecvFlags::DONTWAIT) {
            Ok((0, _)) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok((m, _)) => n -= m,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[tokio::test]
    async fn what_is_forwarded_is_exactly_what_was_peeked_in_order() {
        let (mut producer, src) = UnixStream::pair().expect("pair");
        let (dst, mut consumer) = UnixStream::pair().expect("pair");
        let sent = pattern(3 << 20);
        let to_send = sent.clone();
        let writer = tokio::spawn(async move {
            for piece in to_send.chunks(32 << 10) {
                producer.write_all(piece).await.expect("write");
            }
        });
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            consumer.read_to_end(&mut got).await.expect("read");
            got
        });
        let mut splicer = Splicer::new(64 << 10).expect("pipe");
        let mut peeked = BytesMut::new();
        let mut chunks = 0;
        while peeked.len() < sent.len() {
            let n = Splicer::peek(&src, &mut peeked, splicer.capacity())
                .await
                .expect("peek");
            assert!(n > 0, "the source ended early");
            assert_eq!(splicer.forward(&src, &dst, n).await, Forwarded::All);
            chunks += 1;
        }
        writer.await.expect("writer");
        drop(dst);
        assert_eq!(&peeked[..], &sent[..], "the reader saw other bytes");
        assert_eq!(
            reader.await.expect("reader"),
            sent,
            "the client got other bytes"
        );
        assert!(chunks > 1, "one chunk proves nothing about order");
    }

    #[tokio::test]
    async fn bytes_that_arrive_after_the_peek_stay_for_the_next_chunk() {
        let (mut producer, src) = UnixStream::pair().expect("pair");
        let (dst, mut consumer) = UnixStream::pair().expect("pair");
        producer.write_all(b"first").await.expect("write");
        let mut splicer = Splicer::new(64 << 10).expect("pipe");
        let mut buf = BytesMut::new();
        let n = Splicer::peek(&src, &mut buf, 1024).await.expect("peek");
        producer.write_all(b"second").await.expect("write");
        assert_eq!(splicer.forward(&src, &dst, n).await, Forwarded::All);
        let mut got = vec![0u8; 5];
        consumer.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"first");
        let mut rest = BytesMut::new();
        let m = Splicer::peek(&src, &mut rest, 1024).await.expect("peek");
        assert_eq!(&rest[..m], b"second");
    }

    #[tokio::test]
    async fn a_client_that_left_leaves_the_rest_of_the_chunk_to_discard() {
        let (mut producer, src) = UnixStream::pair().expect("pair");
        let (dst, consumer) = UnixStream::pair().expect("pair");
        drop(consumer);
        let chunk = pattern(40 << 10);
        producer.write_all(&chunk).await.expect("write");
        producer.write_all(b"next").await.expect("write");
        // A small pipe, so that the chunk takes several rounds and some of it is still unread
        // when the destination fails.
        let mut splicer = Splicer::new(4096).expect("pipe");
        let mut buf = BytesMut::new();
        let n = Splicer::peek(&src, &mut buf, chunk.len())
            .await
            .expect("peek");
        assert_eq!(n, chunk.len());
        let Forwarded::DestinationGone { unread } = splicer.forward(&src, &dst, n).await else {
            panic!("the destination is closed");
        };
        assert!(unread < n, "the first round was spliced from the source");
        discard(&src, unread).expect("discard");
        let mut next = BytesMut::new();
        let m = Splicer::peek(&src, &mut next, 1024).await.expect("peek");
        assert_eq!(&next[..m], b"next", "the chunk was not consumed exactly");
    }
}
