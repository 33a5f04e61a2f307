//! The few frames the shim ever writes itself: a graceful GOAWAY at shutdown, and the minimal
//! server side of a connection when containerd is absent (SETTINGS, its ACK, a header block
//! ending a stream, GOAWAY).

use bytes::Bytes;

use super::wire::{ACK, END_HEADERS, END_STREAM, GOAWAY, HEADERS, SETTINGS};

/// A frame: header and payload.
pub(super) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = Vec::with_capacity(9 + len);
    f.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An empty SETTINGS frame (a server's preface) or its ACK.
pub(crate) fn settings_frame(ack: bool) -> Vec<u8> {
    frame(SETTINGS, if ack { ACK } else { 0 }, 0, &[])
}

/// A GOAWAY frame with `last_stream` and NO_ERROR.
pub(crate) fn goaway_frame(last_stream: u32, debug: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(8 + debug.len());
    p.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    p.extend_from_slice(&0u32.to_be_bytes());
    p.extend_from_slice(debug);
    frame(GOAWAY, 0, 0, &p)
}

/// A HEADERS frame holding one whole header block of `fields`, ending the stream if
/// `end_stream`. HPACK literals without indexing, so no encoder state is involved; names and
/// values must be shorter than 127 bytes (one-byte lengths).
pub(crate) fn literal_headers(stream: u32, fields: &[(&str, &str)], end_stream: bool) -> Vec<u8> {
    let mut block = Vec::new();
    for (n, v) in fields {
        debug_assert!(n.len() < 127 && v.len() < 127);
        block.push(0x00);
        block.push(n.len() as u8);
        block.extend_from_slice(n.as_bytes());
        block.push(v.len() as u8);
        block.extend_from_slice(v.as_bytes());
    }
    let flags = if end_stream {
        END_STREAM | END_HEADERS
    } else {
        END_HEADERS
    };
    frame(HEADERS, flags, stream, &block)
}

/// A GOAWAY frame (RFC 9113 §6.8) saying "no new streams; every stream so far will be served"
/// (last stream ID 2^31-1, NO_ERROR), as a server does at the start of a graceful shutdown.
pub(crate) fn graceful_goaway() -> Bytes {
    Bytes::from(goaway_frame(0x7fff_ffff, b"podward-shim restarting"))
}
