//! The digest that tells whether an answer repeats: computed on a gRPC-framed message as it is
//! relayed, in whatever parts it arrives, without holding it.
//!
//! It must not depend on how the bytes arrived or were ordered:
//! - the relay reads DATA parts whose boundaries change from one answer to the next; the digest
//!   follows the message's fields across any split, and XXH3's streaming form gives the same
//!   value however a field's bytes are fed to it;
//! - containerd lists objects from a map, in a different order on every call (and Go writes map
//!   fields, such as labels and annotations, in any order too); the digest of a message is an
//!   order-independent sum of the digests of its top-level fields (a List's items, a Status
//!   answer's `status` and `info` entries), so a reordered answer is a repeat.
//!   (A message that repeats a singular field, where the last one wins, would read as a repeat
//!   with those fields swapped; no protobuf encoder writes that, and the next change repairs it.)
//!
//! A body that is not exactly one well-formed uncompressed message has no digest.
//!
//! XXH3 (randomly seeded per process; twox-hash, which picks AVX2 at run time where the CPU has
//! it) rather than std's SipHash: it hashes a 4 MiB answer in a fraction of a millisecond, on
//! kubelet's path. A collision would only skip decoding one changed answer; the next change,
//! event or rebuild repairs it.

use std::hash::Hasher;
use std::sync::Arc;

use twox_hash::XxHash3_64;
use twox_hash::xxhash3_64::{RawHasher, SecretBuffer};

use super::Body;

/// An XXH3 hasher with the process's seed, and the secret derived from it (192 bytes).
type FieldHasher = RawHasher<[u8; 192]>;

/// Makes digests with one random seed (per process).
pub(crate) struct Digester {
    seed: u64,
    /// Cloned for every field: deriving the secret from the seed once, not per field.
    fresh: Arc<FieldHasher>,
}

impl Default for Digester {
    fn default() -> Self {
        let seed = rand::random();
        let secret = SecretBuffer::with_seed(seed, [0; 192])
            .unwrap_or_else(|_| unreachable!("192 bytes is XXH3's default secret size"));
        Self {
            seed,
            fresh: Arc::new(RawHasher::new(secret)),
        }
    }
}

impl Digester {
    /// A digest to feed a body to as it is relayed.
    pub(crate) fn digest(&self) -> Digest {
        Digest::new(self.seed, self.fresh.clone())
    }

    /// The digest of a body already held.
    pub(crate) fn digest_of(&self, body: &Body) -> Option<u64> {
        let mut d = self.digest();
        for p in &body.parts {
            d.feed(p);
        }
        d.finish()
    }
}

/// Where a [`Digest`] is in the gRPC-framed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the 5-byte gRPC prefix.
    Prefix,
    /// Reading a field's key.
    Key,
    /// Reading a varint field's value.
    Value,
    /// Reading a length-delimited field's length.
    Len,
    /// Hashing this many more bytes of a field's payload.
    Payload(u64),
    /// The message ended exactly at the end of the bytes fed so far.
    Done,
    /// Not one well-formed uncompressed message: no digest.
    Broken,
}

/// A varint being read across however many parts it arrives in.
#[derive(Debug, Clone, Copy, Default)]
struct Varint {
    value: u64,
    shift: u32,
}

impl Varint {
    /// Adds a byte; the value once it is complete. Longer than ten bytes is an error.
    fn push(&mut self, b: u8) -> Result<Option<u64>, ()> {
        if self.shift >= 64 {
            return Err(());
        }
        self.value |= u64::from(b & 0x7f) << self.shift;
        self.shift += 7;
        if b & 0x80 != 0 {
            return Ok(None);
        }
        let v = self.value;
        *self = Self::default();
        Ok(Some(v))
    }
}

/// The order-independent digest of one gRPC-framed message, fed in parts as they are relayed:
/// the sum of the XXH3 of each top-level field (its key, its length or varint value, its
/// payload), with the field count. Hand-rolled rather than decoded with prost: it must follow a
/// message split anywhere, without holding it.
#[derive(Clone)]
pub(crate) struct Digest {
    seed: u64,
    state: State,
    prefix: [u8; 5],
    prefix_len: usize,
    /// Bytes of the message not yet read.
    left: u64,
    varint: Varint,
    fresh: Arc<FieldHasher>,
    field: FieldHasher,
    sum: u64,
    count: u64,
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Digest")
            .field("state", &self.state)
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl Digest {
    fn new(seed: u64, fresh: Arc<FieldHasher>) -> Self {
        Self {
            seed,
            state: State::Prefix,
            prefix: [0; 5],
            prefix_len: 0,
            left: 0,
            varint: Varint::default(),
            field: (*fresh).clone(),
            fresh,
            sum: 0,
            count: 0,
        }
    }

    /// Whether the message carries gRPC's compressed flag.
    pub(crate) fn compressed(&self) -> bool {
        self.prefix_len == self.prefix.len() && self.prefix[0] != 0
    }

    /// The next bytes of the body.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        while let Some((&b, rest)) = bytes.split_first() {
            match self.state {
                State::Broken => return,
                State::Payload(n) => {
                    let take = usize::try_from(n).map_or(bytes.len(), |n| n.min(bytes.len()));
                    self.field.write(&bytes[..take]);
                    bytes = &bytes[take..];
                    self.left -= take as u64;
                    let n = n - take as u64;
                    if n == 0 {
                        self.end_field();
                    } else {
                        self.state = State::Payload(n);
                    }
                    continue;
                }
                State::Prefix => {
                    self.prefix[self.prefix_len] = b;
                    self.prefix_len += 1;
                    if self.prefix_len == 5 {
                        let [_, l @ ..] = self.prefix;
                        self.left = u64::from(u32::from_be_bytes(l));
                        self.state = if self.compressed() {
                            State::Broken
                        } else if self.left == 0 {
                            State::Done
                        } else {
                            State::Key
                        };
                    }
                }
                State::Done => self.state = State::Broken,
                State::Key | State::Value | State::Len => {
                    self.left -= 1;
                    match self.varint.push(b) {
                        Err(()) => self.state = State::Broken,
                        Ok(None) if self.left == 0 => self.state = State::Broken,
                        Ok(None) => {}
                        Ok(Some(v)) => self.varint_done(v),
                    }
                }
            }
            bytes = rest;
        }
    }

    fn varint_done(&mut self, v: u64) {
        match self.state {
            State::Key => {
                self.field.clone_from(&self.fresh);
                self.field.write(&v.to_le_bytes());
                self.state = match v & 7 {
                    0 => State::Value,
                    1 => State::Payload(8),
                    2 => State::Len,
                    5 => State::Payload(4),
                    _ => State::Broken,
                };
            }
            State::Value => {
                self.field.write(&v.to_le_bytes());
                self.end_field();
                return;
            }
            State::Len => {
                self.field.write(&v.to_le_bytes());
                self.state = State::Payload(v);
            }
            _ => return,
        }
        match self.state {
            State::Payload(0) => self.end_field(),
            State::Payload(n) if n > self.left => self.state = State::Broken,
            State::Value | State::Len if self.left == 0 => self.state = State::Broken,
            _ => {}
        }
    }

    fn end_field(&mut self) {
        self.sum = self.sum.wrapping_add(self.field.finish());
        self.count += 1;
        self.state = if self.left == 0 {
            State::Done
        } else {
            State::Key
        };
    }

    /// The digest, if the bytes fed were exactly one well-formed uncompressed message.
    pub(crate) fn finish(&self) -> Option<u64> {
        if self.state != State::Done {
            return None;
        }
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.sum.to_le_bytes());
        out[8..].copy_from_slice(&self.count.to_le_bytes());
        Some(XxHash3_64::oneshot_with_seed(self.seed, &out))
    }
}

#[cfg(test)]
mod tests;
