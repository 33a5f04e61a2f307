//! The layout of HTTP/2 frames (RFC 9113 §4.1): the connection preface, frame types and flags,
//! and the length a frame header announces.

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub(crate) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const PUSH_PROMISE: u8 = 0x5;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const PING: u8 = 0x6;
pub(crate) const GOAWAY: u8 = 0x7;
pub(crate) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;

pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const ACK: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;
pub(crate) const PADDED: u8 = 0x8;
pub(crate) const PRIORITY: u8 = 0x20;

/// Whether `bytes`, read from a frame boundary, are whole SETTINGS, PING and WINDOW_UPDATE
/// frames and nothing else: connection upkeep, which asks the peer for no work (the frames a
/// client sends while an answer streams to it, its window updates, are these).
pub(crate) fn only_upkeep(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(header) = rest.first_chunk::<9>() else {
            return false;
        };
        if !matches!(header[3], SETTINGS | PING | WINDOW_UPDATE) {
            return false;
        }
        let Some(after) = rest.get(9 + payload_len(header)..) else {
            return false;
        };
        rest = after;
    }
    !bytes.is_empty()
}

/// The payload length a frame header announces (its first 24 bits).
pub(super) fn payload_len(header: &[u8; 9]) -> usize {
    usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2])
}
