//! containerd absent: the client is answered as a gRPC server that cannot serve would answer.
//!
//! Closing the accepted connection at once gives gRPC-Go and C-core clients `UNAVAILABLE`, but
//! tonic/hyper report a connection closed before any SETTINGS as `CANCELLED`. So the relay
//! speaks just enough HTTP/2 here: its SETTINGS, a trailers-only `UNAVAILABLE` for each call the
//! client opened, then GOAWAY and close, so that the client's next call dials again (and reaches
//! containerd once it is back). Every client stack then reports `UNAVAILABLE`, as when its own
//! dial of containerd's socket fails.

use std::ops::Range;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::time::Instant;

use crate::h2read::{
    FrameError, FrameReader, FrameSink, goaway_frame, literal_headers, settings_frame,
};

/// The answer when containerd's socket cannot be dialled.
pub(super) const UNREACHABLE: &str = "podward-shim: containerd is not reachable";

/// A trailers-only gRPC answer (one HEADERS frame ending the stream) with `grpc-status` and
/// `grpc-message`.
fn trailers_only(stream: u32, grpc_status: &str, message: &str) -> Vec<u8> {
    literal_headers(
        stream,
        &[
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", grpc_status),
            ("grpc-message", message),
        ],
        true,
    )
}

/// After answering, how long to wait for more of the client's streams before the GOAWAY.
const LINGER: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Opened {
    streams: Vec<u32>,
    settings: usize,
}

impl FrameSink for Opened {
    fn block_start(&mut self, stream: u32, _end: bool, promise: bool) {
        // The block is not decoded: every call gets the same answer, and nothing is indexed.
        if !promise && stream % 2 == 1 && !self.streams.contains(&stream) {
            self.streams.push(stream);
        }
    }
    fn block_fragment(&mut self, _fragment: &[u8]) -> Result<(), FrameError> {
        Ok(())
    }
    fn block_end(&mut self) -> Result<(), FrameError> {
        Ok(())
    }
    fn data(&mut self, _: u32, _: &[u8], _: Range<usize>, _: bool) -> Result<(), FrameError> {
        Ok(())
    }
    fn rst_stream(&mut self, _stream: u32, _code: u32) {}
    fn goaway(&mut self, _last_stream: u32, _code: u32) {}
    fn settings(&mut self, ack: bool) {
        if !ack {
            self.settings += 1;
        }
    }
}

/// Answers `client` with `message` until its first calls are refused, or the deadline.
pub(super) async fn answer(mut client: UnixStream, deadline: Instant, message: &str) {
    let mut frames = FrameReader::client();
    let mut opened = Opened::default();
    let mut answered = 0;
    let mut last = 0;
    let mut buf = BytesMut::new();
    if client.write_all(&settings_frame(false)).await.is_err() {
        return;
    }
    let mut linger: Option<Instant> = None;
    loop {
        buf.reserve(16 << 10);
        let until = linger.map_or(deadline, |l| l.min(deadline));
        let read = tokio::time::timeout_at(until, client.read_buf(&mut buf)).await;
        let Ok(Ok(n)) = read else { break };
        if n == 0 {
            return;
        }
        let chunk = buf.split().freeze();
        if frames.feed(&chunk, &mut opened).is_err() {
            break;
        }
        let mut out = Vec::new();
        for _ in 0..std::mem::take(&mut opened.settings) {
            out.extend_from_slice(&settings_frame(true));
        }
        for &id in &opened.streams[answered..] {
            out.extend_from_slice(&trailers_only(id, "14", message));
            last = last.max(id);
        }
        if opened.streams.len() > answered {
            answered = opened.streams.len();
            linger = Some(Instant::now() + LINGER);
        }
        if !out.is_empty() && client.write_all(&out).await.is_err() {
            return;
        }
    }
    let _ = client
        .write_all(&goaway_frame(last, message.as_bytes()))
        .await;
    let _ = client.shutdown().await;
}
