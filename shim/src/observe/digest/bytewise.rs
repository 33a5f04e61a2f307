//! [`Digest`]: where one message's digest is, and the byte-wise path that follows the message
//! across any split, a byte of a key or varint at a time and as much of a payload as is at hand
//! (`whole.rs` is the fast path for the fields that lie whole).

use std::hash::Hasher;
use std::sync::Arc;

use smallvec::SmallVec;
use twox_hash::XxHash3_64;
use twox_hash::xxhash3_64::RawHasher;

use super::mix::{ENTRY, NESTED, mix};
use super::role::Role;
use super::shape::Shape;
use super::varint::Varint;

/// An XXH3 hasher with the process's seed, and the secret derived from it (192 bytes).
pub(super) type FieldHasher = RawHasher<[u8; 192]>;

/// Nested messages a digest follows at once: deep enough for every shape in
/// [`ROOTS`](super::shape::ROOTS) (a test checks it).
pub(super) const MAX_DEPTH: usize = 5;

/// Payloads up to this long are hashed in one call (XXH3's own cut-off between its short-input
/// code and its streaming one); longer ones are hashed as they come.
pub(super) const SHORT: usize = 240;

/// Where a [`Digest`] is in the gRPC-framed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Reading the 5-byte gRPC prefix.
    Prefix,
    /// Reading a field's key.
    Key,
    /// Reading a varint field's value.
    Value,
    /// Reading a length-delimited field's length.
    Len,
    /// Reading this many more bytes of a field's payload.
    Payload(u64),
    /// The message ended exactly at the end of the bytes fed so far.
    Done,
    /// Not one well-formed uncompressed message: no digest.
    Broken,
}

/// One message being digested: the answer itself, or a message nested in it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Frame {
    pub(super) shape: &'static Shape,
    /// Bytes of this message not yet read.
    pub(super) left: u64,
    /// The key of the field that holds it in its parent.
    pub(super) key: u64,
    /// Its plain fields, chained in the order written.
    pub(super) chain: u64,
    /// The sum of its map entries' and nested messages' digests, and how many there were.
    pub(super) sum: u64,
    pub(super) count: u64,
}

/// The order-independent digest of one gRPC-framed message, fed in parts as they are relayed.
/// Hand-rolled rather than decoded with prost: it must follow a message split anywhere, without
/// holding it, and prost would not say in which order a map arrived.
///
/// Each field's payload is hashed alone (a varint is its own value): up to [`SHORT`] bytes in
/// one call, where it lies if it arrived whole or else once gathered, longer ones as they come.
/// Which of these applies depends on the length alone, so a split never changes a hash. A plain
/// field is chained into its message's digest with its key, in order; a map entry or a nested
/// message is summed.
#[derive(Clone)]
pub(crate) struct Digest {
    pub(super) seed: u64,
    pub(super) root: &'static Shape,
    pub(super) state: State,
    pub(super) prefix: [u8; 5],
    pub(super) prefix_len: usize,
    pub(super) varint: Varint,
    /// The field being read: its key and what becomes of it.
    pub(super) key: u64,
    pub(super) role: Role,
    /// The message and the messages it is nested in, outermost first; never more than
    /// [`MAX_DEPTH`], so held inline.
    pub(super) frames: SmallVec<[Frame; MAX_DEPTH]>,
    pub(super) fresh: Arc<FieldHasher>,
    /// The payload being read: its length; up to [`SHORT`] it is gathered in `short`, longer it
    /// is hashed as it comes by `long`.
    pub(super) payload_len: u64,
    /// Boxed and made at the first long payload: most answers have none, and a hasher is
    /// ~600 bytes to copy for every call.
    pub(super) long: Option<Box<FieldHasher>>,
    pub(super) short: [u8; SHORT],
    pub(super) short_len: usize,
    /// The byte-wise path alone, for the tests that compare the two.
    #[cfg(test)]
    pub(super) bytewise: bool,
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Digest")
            .field("state", &self.state)
            .field("depth", &self.frames.len())
            .finish_non_exhaustive()
    }
}

impl Digest {
    pub(super) fn new(seed: u64, root: &'static Shape, fresh: Arc<FieldHasher>) -> Self {
        Self {
            seed,
            root,
            state: State::Prefix,
            prefix: [0; 5],
            prefix_len: 0,
            varint: Varint::default(),
            key: 0,
            role: Role::Ordered,
            frames: SmallVec::new(),
            payload_len: 0,
            long: None,
            fresh,
            short: [0; SHORT],
            short_len: 0,
            #[cfg(test)]
            bytewise: false,
        }
    }

    /// Whether the message carries gRPC's compressed flag.
    pub(crate) fn compressed(&self) -> bool {
        self.prefix_len == self.prefix.len() && self.prefix[0] != 0
    }

    /// The next bytes of the body.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.state == State::Key && self.varint.is_empty() && self.whole_fields_on() {
                bytes = self.whole_fields(bytes);
            }
            bytes = self.step(bytes);
        }
    }

    /// Whether [`Digest::feed`] takes whole fields at once (always, but in the tests that
    /// compare it with the byte-wise path alone).
    fn whole_fields_on(&self) -> bool {
        #[cfg(test)]
        return !self.bytewise;
        #[cfg(not(test))]
        true
    }

    /// The byte-wise path: one byte of the prefix or of a varint, or as much of a payload as
    /// is here; returns the bytes after it.
    fn step<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        let Some((&b, rest)) = bytes.split_first() else {
            return bytes;
        };
        match self.state {
            State::Broken => return &[],
            State::Done => {
                self.state = State::Broken;
                return &[];
            }
            State::Payload(n) => {
                let take = usize::try_from(n).map_or(bytes.len(), |n| n.min(bytes.len()));
                let (now, later) = bytes.split_at(take);
                if let Some(top) = self.frames.last_mut() {
                    top.left -= take as u64;
                }
                if matches!(self.role, Role::Skipped) {
                    // Left out: consumed, neither gathered nor hashed.
                    if take as u64 == n {
                        self.end_field();
                    } else {
                        self.state = State::Payload(n - take as u64);
                    }
                } else if take as u64 == n && self.short_len == 0 && self.payload_is_short() {
                    // The whole payload is here: hashed where it lies.
                    let h = self.hash_short(now);
                    self.field_done(h);
                } else {
                    self.payload(now);
                    let n = n - take as u64;
                    if n == 0 {
                        let h = self.payload_hash();
                        self.field_done(h);
                    } else {
                        self.state = State::Payload(n);
                    }
                }
                return later;
            }
            State::Prefix => {
                self.prefix[self.prefix_len] = b;
                self.prefix_len += 1;
                if self.prefix_len == 5 {
                    let [_, l @ ..] = self.prefix;
                    self.push_frame(self.root, u64::from(u32::from_be_bytes(l)), 0);
                    self.state = if self.compressed() {
                        State::Broken
                    } else {
                        State::Key
                    };
                    self.close_finished();
                }
            }
            State::Key | State::Value | State::Len => self.varint_byte(b),
        }
        rest
    }

    /// One byte of a field's key, varint value or length.
    fn varint_byte(&mut self, b: u8) {
        let Some(top) = self.frames.last_mut() else {
            self.state = State::Broken;
            return;
        };
        top.left -= 1;
        let at_end = top.left == 0;
        match self.varint.push(b) {
            Err(()) => self.state = State::Broken,
            Ok(None) if at_end => self.state = State::Broken,
            Ok(None) => {}
            Ok(Some(v)) => self.varint_done(v),
        }
    }

    pub(super) fn push_frame(&mut self, shape: &'static Shape, left: u64, key: u64) {
        self.frames.push(Frame {
            shape,
            left,
            key,
            chain: 0,
            sum: 0,
            count: 0,
        });
    }

    /// Bytes left in the innermost message.
    fn left(&self) -> u64 {
        self.frames.last().map_or(0, |f| f.left)
    }

    /// What becomes of the field with `key` in the innermost message (`None`: no message).
    pub(super) fn role_of(&self, key: u64) -> Option<Role> {
        Some(Role::of(self.frames.last()?.shape, key))
    }

    fn varint_done(&mut self, v: u64) {
        match self.state {
            State::Key => {
                self.key = v;
                let Some(role) = self.role_of(v) else {
                    return;
                };
                let wire = v & 7;
                self.role = role;
                self.state = match wire {
                    0 => State::Value,
                    1 => self.start_payload(8),
                    2 => State::Len,
                    5 => self.start_payload(4),
                    _ => State::Broken,
                };
                match self.state {
                    State::Payload(n) if n > self.left() => self.state = State::Broken,
                    State::Value | State::Len if self.left() == 0 => self.state = State::Broken,
                    _ => {}
                }
            }
            State::Value => self.field_done(v),
            State::Len => {
                if v > self.left() {
                    self.state = State::Broken;
                    return;
                }
                if let Role::Nested(shape) = self.role {
                    if self.frames.len() == MAX_DEPTH {
                        self.state = State::Broken;
                        return;
                    }
                    if let Some(top) = self.frames.last_mut() {
                        top.left -= v;
                    }
                    self.push_frame(shape, v, self.key);
                    self.end_field();
                    return;
                }
                self.state = self.start_payload(v);
                if v == 0 && matches!(self.role, Role::Skipped) {
                    self.end_field();
                } else if v == 0 {
                    let h = self.payload_hash();
                    self.field_done(h);
                }
            }
            _ => {}
        }
    }

    fn start_payload(&mut self, len: u64) -> State {
        self.payload_len = len;
        self.short_len = 0;
        if !self.payload_is_short() && !matches!(self.role, Role::Skipped) {
            self.fresh_long();
        }
        State::Payload(len)
    }

    /// The long payloads' hasher, reset to the process's seed.
    pub(super) fn fresh_long(&mut self) -> &mut FieldHasher {
        if let Some(long) = self.long.as_deref_mut() {
            long.clone_from(&self.fresh);
        }
        let fresh = &self.fresh;
        self.long.get_or_insert_with(|| Box::new((**fresh).clone()))
    }

    fn payload_is_short(&self) -> bool {
        self.payload_len <= SHORT as u64
    }

    /// Part of a field's payload (never a skipped field's: [`Digest::feed`] consumes those).
    fn payload(&mut self, bytes: &[u8]) {
        if self.payload_is_short() {
            let end = self.short_len + bytes.len();
            if let Some(room) = self.short.get_mut(self.short_len..end) {
                room.copy_from_slice(bytes);
                self.short_len = end;
            }
        } else {
            if let Some(long) = &mut self.long {
                long.write(bytes);
            }
        }
    }

    /// The hash of the payload just read.
    fn payload_hash(&self) -> u64 {
        if self.payload_is_short() {
            self.hash_short(&self.short[..self.short_len])
        } else {
            self.long.as_ref().map_or(0, |long| long.finish())
        }
    }

    #[inline]
    pub(super) fn hash_short(&self, bytes: &[u8]) -> u64 {
        XxHash3_64::oneshot_with_seed(self.seed, bytes)
    }

    /// A field ended; `h` is its payload's hash (or its varint value).
    pub(super) fn field_done(&mut self, h: u64) {
        let seed = self.seed;
        let key = self.key;
        if let Some(top) = self.frames.last_mut() {
            match self.role {
                Role::Ordered => top.chain = mix(seed, top.chain, key, h),
                Role::Entry => {
                    top.sum = top.sum.wrapping_add(mix(seed, key, h, ENTRY));
                    top.count += 1;
                }
                Role::Nested(_) | Role::Skipped => {}
            }
        }
        self.end_field();
    }

    pub(super) fn end_field(&mut self) {
        self.state = State::Key;
        // Most fields end inside their message: no call to fold anything then.
        if self.left() == 0 {
            self.close_finished();
        }
    }

    /// Folds every message that has been read to its end into its parent; the answer itself
    /// ending is the end.
    fn close_finished(&mut self) {
        while self.state == State::Key && self.left() == 0 {
            if self.frames.len() <= 1 {
                self.state = State::Done;
                return;
            }
            let Some(child) = self.frames.pop() else {
                return;
            };
            let d = mix(
                self.seed,
                child.key,
                message_digest(self.seed, &child),
                NESTED,
            );
            if let Some(parent) = self.frames.last_mut() {
                parent.sum = parent.sum.wrapping_add(d);
                parent.count += 1;
            }
        }
    }

    /// The digest, if the bytes fed were exactly one well-formed uncompressed message.
    pub(crate) fn finish(&self) -> Option<u64> {
        if self.state != State::Done {
            return None;
        }
        self.frames.first().map(|f| message_digest(self.seed, f))
    }
}

fn message_digest(seed: u64, f: &Frame) -> u64 {
    mix(seed, f.chain, f.sum, f.count)
}
