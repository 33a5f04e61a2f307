//! Recognising a List or Status answer that says nothing new, without decoding it.
//!
//! kubelet relists every second and the answer usually holds the same objects as the previous
//! one: such a repeat carries no news and is not decoded (decoding a 100-container List costs far
//! more CPU than relaying it, and a 4 MiB one several milliseconds of the relay's thread).
//!
//! "The same" must not depend on how the bytes arrived or were ordered:
//! - a body is kept as the DATA parts the relay happened to read, and their boundaries change from
//!   one answer to the next; the digest is computed over fixed-size blocks of the byte stream, so
//!   it is the same however the stream was split;
//! - containerd lists objects from a map, in a different order on every call (and Go writes map
//!   fields, such as labels and annotations, in any order too); the digest of a message is an
//!   order-independent sum of the digests of its top-level fields (a List's items, a Status
//!   answer's `status` and `info` entries), so a reordered answer is a repeat.
//!   (A message that repeats a singular field, where the last one wins, would read as a repeat
//!   with those fields swapped; no protobuf encoder writes that, and the next change repairs it.)
//!
//! Digests rather than the answers themselves keep the memory to a few hundred KiB at most.
//! foldhash (randomly seeded per process) rather than std's SipHash: hashing a 4 MiB answer is on
//! the decoder's CPU budget for every relist, and foldhash is several times faster. A collision
//! would only skip decoding one changed answer; the next change, event or rebuild repairs it.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use bytes::Buf;

use super::{Body, Raw, Watched};

/// Distinct List/Status requests remembered; past it the memory starts afresh.
const ENTRIES: usize = 4096;

/// Bytes per block fed to the hasher (see [`Blocks`]).
const BLOCK: usize = 1024;

/// The last answer's digest per (method, request digest).
#[derive(Default)]
pub(super) struct Unchanged {
    keys: foldhash::fast::RandomState,
    last: HashMap<(Watched, u64), u64>,
}

impl Unchanged {
    /// Whether `raw` is a successful List/Status call whose answer has the same content as the
    /// previous answer to the same request (then it need not be decoded). Mutating calls and
    /// failed calls are never repeats.
    pub(super) fn is_repeat(&mut self, raw: &Raw) -> bool {
        let Raw::Call {
            method,
            request,
            response,
            grpc_status: Some(0),
            ..
        } = raw
        else {
            return false;
        };
        if method.is_mutating() {
            return false;
        }
        let key = (*method, self.digest(request));
        let answer = self.digest(response);
        if self.last.get(&key) == Some(&answer) {
            return true;
        }
        if self.last.len() >= ENTRIES {
            self.last.clear();
        }
        self.last.insert(key, answer);
        false
    }

    /// The body's first gRPC message as the unordered sum of its top-level fields' digests; the
    /// raw byte stream's digest when it is not one well-formed uncompressed message.
    fn digest(&self, body: &Body) -> u64 {
        if let Some(d) = body.first_message().and_then(|m| self.fields_digest(m)) {
            return d;
        }
        let mut h = Blocks::new(self.keys.build_hasher());
        for p in &body.parts {
            h.write(p);
        }
        h.finish(u64::MAX)
    }

    fn fields_digest(&self, mut msg: impl Buf) -> Option<u64> {
        let mut sum = 0u64;
        let mut count = 0u64;
        while msg.has_remaining() {
            let key = prost::encoding::decode_varint(&mut msg).ok()?;
            let mut h = Blocks::new(self.keys.build_hasher());
            h.write(&key.to_le_bytes());
            let len = match key & 7 {
                0 => {
                    let v = prost::encoding::decode_varint(&mut msg).ok()?;
                    h.write(&v.to_le_bytes());
                    0
                }
                1 => 8,
                2 => usize::try_from(prost::encoding::decode_varint(&mut msg).ok()?).ok()?,
                5 => 4,
                _ => return None,
            };
            if msg.remaining() < len {
                return None;
            }
            let mut left = len;
            while left > 0 {
                let chunk = msg.chunk();
                let n = chunk.len().min(left);
                h.write(&chunk[..n]);
                msg.advance(n);
                left -= n;
            }
            sum = sum.wrapping_add(h.finish(len as u64));
            count += 1;
        }
        let mut h = self.keys.build_hasher();
        h.write_u64(sum);
        h.write_u64(count);
        Some(h.finish())
    }
}

/// Feeds a hasher fixed-size blocks of a byte stream, whatever slices the stream comes in: the
/// digest of the same bytes is the same however they were split (foldhash's `write` mixes each
/// call's slice as a unit, so feeding it the slices directly would not be).
struct Blocks<H> {
    h: H,
    buf: [u8; BLOCK],
    fill: usize,
}

impl<H: Hasher> Blocks<H> {
    fn new(h: H) -> Self {
        Self {
            h,
            buf: [0; BLOCK],
            fill: 0,
        }
    }

    fn write(&mut self, mut bytes: &[u8]) {
        if self.fill > 0 {
            let n = (BLOCK - self.fill).min(bytes.len());
            self.buf[self.fill..self.fill + n].copy_from_slice(&bytes[..n]);
            self.fill += n;
            bytes = &bytes[n..];
            if self.fill < BLOCK {
                return;
            }
            self.h.write(&self.buf);
            self.fill = 0;
        }
        let mut blocks = bytes.chunks_exact(BLOCK);
        for b in &mut blocks {
            self.h.write(b);
        }
        let rest = blocks.remainder();
        self.buf[..rest.len()].copy_from_slice(rest);
        self.fill = rest.len();
    }

    /// The digest, with `len` (the stream's length or a tag) folded in.
    fn finish(mut self, len: u64) -> u64 {
        self.h.write(&self.buf[..self.fill]);
        self.h.write_u64(len);
        self.h.finish()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::observe::Outcome;

    fn call(method: Watched, parts: &[&[u8]], status: Option<i32>) -> Raw {
        let mut response = Body::default();
        for p in parts {
            response.push(Bytes::copy_from_slice(p));
        }
        Raw::Call {
            method,
            request: Body::from_bytes(Bytes::from_static(b"\0\0\0\0\0")),
            response,
            grpc_status: status,
            outcome: Outcome::Delivered,
            requested_at_ns: 0,
            completed_at_ns: 0,
        }
    }

    fn list(parts: &[&[u8]], status: Option<i32>) -> Raw {
        call(Watched::ListContainers, parts, status)
    }

    /// A gRPC-framed message with the given length-delimited field-1 items.
    fn framed(items: &[&[u8]]) -> Vec<u8> {
        let mut msg = Vec::new();
        for i in items {
            msg.push(0x0a);
            prost::encoding::encode_varint(i.len() as u64, &mut msg);
            msg.extend_from_slice(i);
        }
        let mut out = vec![0];
        out.extend_from_slice(&u32::try_from(msg.len()).expect("small").to_be_bytes());
        out.extend(msg);
        out
    }

    #[test]
    fn identical_answers_are_skipped_but_changes_and_mutations_are_not() {
        let mut u = Unchanged::default();
        assert!(!u.is_repeat(&list(&[b"a"], Some(0))));
        assert!(u.is_repeat(&list(&[b"a"], Some(0))));
        assert!(
            !u.is_repeat(&list(&[b"b"], Some(0))),
            "a changed answer is news"
        );
        assert!(
            !u.is_repeat(&list(&[b"b"], Some(14))),
            "failed calls are never deduplicated"
        );
        let run = call(Watched::RunPodSandbox, &[b"x"], Some(0));
        assert!(!u.is_repeat(&run));
        assert!(!u.is_repeat(&run), "mutating calls always count");
    }

    #[test]
    fn the_same_answer_split_differently_is_a_repeat() {
        let big: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let body = framed(&[&big, b"second item"]);
        let mut u = Unchanged::default();
        assert!(!u.is_repeat(&list(&[&body], Some(0))));
        for split in [1, 5, 6, 1023, 1024, 1025, 3000, body.len() - 1] {
            let (a, b) = body.split_at(split);
            assert!(u.is_repeat(&list(&[a, b], Some(0))), "split at {split}");
        }
        let thirds: Vec<&[u8]> = body.chunks(body.len() / 3 + 1).collect();
        assert!(u.is_repeat(&list(&thirds, Some(0))));
    }

    #[test]
    fn reordered_items_are_a_repeat_but_changed_or_missing_items_are_not() {
        let mut u = Unchanged::default();
        assert!(!u.is_repeat(&list(&[&framed(&[b"one", b"two", b"three"])], Some(0))));
        assert!(u.is_repeat(&list(&[&framed(&[b"three", b"one", b"two"])], Some(0))));
        assert!(!u.is_repeat(&list(&[&framed(&[b"three", b"one"])], Some(0))));
        assert!(!u.is_repeat(&list(&[&framed(&[b"three", b"one", b"one"])], Some(0))));
        assert!(!u.is_repeat(&list(&[&framed(&[b"three", b"one", b"twO"])], Some(0))));
    }

    #[test]
    fn a_body_that_is_not_one_message_is_digested_as_bytes() {
        let mut u = Unchanged::default();
        // Truncated message: the length prefix says 9 bytes, 2 follow.
        let truncated: &[u8] = &[0, 0, 0, 0, 9, 0x0a, 0];
        assert!(!u.is_repeat(&list(&[truncated], Some(0))));
        assert!(u.is_repeat(&list(&[&truncated[..3], &truncated[3..]], Some(0))));
        assert!(!u.is_repeat(&list(&[&[0, 0, 0, 0, 9, 0x0a, 1]], Some(0))));
    }

    #[test]
    fn hostile_field_headers_fall_back_to_the_bytes_without_a_panic() {
        let frame = |msg: &[u8]| {
            let mut out = vec![0];
            out.extend_from_slice(&u32::try_from(msg.len()).expect("small").to_be_bytes());
            out.extend_from_slice(msg);
            out
        };
        let mut max_len = vec![0x0a];
        prost::encoding::encode_varint(u64::MAX, &mut max_len);
        let hostile = [
            max_len,                            // a length of 2^64 - 1
            vec![0x0f, 1, 2, 3],                // wire type 7
            vec![0xff; 12],                     // a key varint that never ends
            vec![0x09, 1, 2, 3],                // a fixed64 with 3 bytes
            vec![0x08, 0xff, 0xff, 0xff, 0xff], // a truncated varint value
        ];
        let mut u = Unchanged::default();
        for msg in &hostile {
            let body = frame(msg);
            assert!(!u.is_repeat(&list(&[&body], Some(0))), "{msg:?}");
            // Digested as bytes: the same bytes split anywhere are a repeat, changed ones not.
            let (a, b) = body.split_at(body.len() / 2);
            assert!(u.is_repeat(&list(&[a, b], Some(0))), "{msg:?}");
        }
    }
}
