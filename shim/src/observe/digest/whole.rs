//! The digest's fast path: the fields that lie whole in the bytes at hand, read a field at a
//! time instead of a byte at a time.
//!
//! The relay hands the digest DATA parts of up to its read size, and an answer's fields (a
//! List's items too) are small next to that, so nearly every field lies whole in the part that
//! carries it. Reading those through [`Digest::feed`]'s state machine costs a dispatch per
//! byte; here a field's key, length and payload are read straight from the slice and folded
//! exactly as the byte-wise path folds them, and a nested message the shape names is entered as
//! the byte-wise path enters it (its frame pushed, its fields read on from there). Whatever is
//! not plainly whole and well-formed here — a field cut by the part's end, a varint past ten
//! bytes, a length past its message's end, a nesting past the depth bound, an unknown wire
//! type — is left untouched to the byte-wise path, which carries it across the part's end or
//! finds the message broken. So the digest stays the same function of the message's bytes
//! however they are split, and a malformed message has no digest either way.

use std::hash::Hasher;

use super::bytewise::{Digest, MAX_DEPTH, SHORT, State};
use super::mix::{ENTRY, NESTED, mix};
use super::role::Role;
use super::shape::Shape;
use super::varint;

impl Digest {
    /// Reads the fields that lie whole at the start of `bytes`, which must be at a field's
    /// start (the state [`State::Key`], no byte of the key read); returns the bytes it left.
    pub(super) fn whole_fields<'a>(&mut self, mut bytes: &'a [u8]) -> &'a [u8] {
        while self.state == State::Key {
            let Some(top) = self.frames.last() else {
                break;
            };
            let left = top.left;
            // The field cannot run past its message: a varint that does is broken, and the
            // byte-wise path says so.
            let within = usize::try_from(left).map_or(bytes.len(), |l| l.min(bytes.len()));
            let Some(field) = bytes.get(..within) else {
                break;
            };
            let Some((key, key_len)) = varint::read(field) else {
                break;
            };
            let Some(role) = self.role_of(key) else {
                break;
            };
            let rest = field.get(key_len..).unwrap_or_default();
            let (used, h) = match key & 7 {
                0 => {
                    let Some((value, n)) = varint::read(rest) else {
                        break;
                    };
                    (key_len + n, value)
                }
                wire @ (1 | 5) => {
                    let n = if wire == 1 { 8 } else { 4 };
                    let Some(payload) = rest.get(..n) else {
                        break;
                    };
                    (key_len + n, self.payload_hash_of(role, payload))
                }
                2 => {
                    let Some((len, n)) = varint::read(rest) else {
                        break;
                    };
                    let header = key_len + n;
                    // `header` bytes lie within the message (`field` does): no underflow.
                    if len > left - header as u64 {
                        break;
                    }
                    let whole = usize::try_from(len)
                        .ok()
                        .and_then(|len| rest.get(n..n + len));
                    if let Role::Nested(shape) = role {
                        let Some(used) = self.enter(shape, key, header, len, whole) else {
                            break;
                        };
                        bytes = bytes.get(used..).unwrap_or_default();
                        continue;
                    }
                    let Some(payload) = whole else {
                        break;
                    };
                    (header + payload.len(), self.payload_hash_of(role, payload))
                }
                _ => break,
            };
            if let Some(top) = self.frames.last_mut() {
                top.left -= used as u64;
            }
            bytes = bytes.get(used..).unwrap_or_default();
            self.key = key;
            self.role = role;
            self.field_done(h);
        }
        bytes
    }

    /// Enters a nested message of `shape` in field `key`, whose key and length (`header`
    /// bytes, the length `len`) were just read: at once if it lies here whole and well-formed
    /// (`whole`), else by pushing its frame to read it field by field. Returns the bytes used;
    /// `None` past the depth bound, which the byte-wise path finds broken.
    fn enter(
        &mut self,
        shape: &'static Shape,
        key: u64,
        header: usize,
        len: u64,
        whole: Option<&[u8]>,
    ) -> Option<usize> {
        let depth = self.frames.len();
        if depth == MAX_DEPTH {
            return None;
        }
        let seed = self.seed;
        let digest = whole.and_then(|m| self.whole_message(shape, m, depth + 1));
        let top = self.frames.last_mut()?;
        top.left -= header as u64 + len;
        let used = match digest {
            Some(d) => {
                // Folded into its parent as the byte-wise path folds a message it has read.
                top.sum = top.sum.wrapping_add(mix(seed, key, d, NESTED));
                top.count += 1;
                header + whole.map_or(0, <[u8]>::len)
            }
            None => {
                self.push_frame(shape, len, key);
                header
            }
        };
        self.end_field();
        Some(used)
    }

    /// The digest of a message of `shape` at `depth` (the answer's is 1) that is `bytes`
    /// exactly, as the byte-wise path makes it; `None` if it is malformed (the byte-wise path
    /// then finds it broken, or a nesting past [`MAX_DEPTH`]).
    fn whole_message(
        &mut self,
        shape: &'static Shape,
        mut bytes: &[u8],
        depth: usize,
    ) -> Option<u64> {
        let (mut chain, mut sum, mut count) = (0u64, 0u64, 0u64);
        while !bytes.is_empty() {
            let (key, key_len) = varint::read(bytes)?;
            bytes = bytes.get(key_len..)?;
            let role = Role::of(shape, key);
            let h = match key & 7 {
                0 => {
                    let (value, n) = varint::read(bytes)?;
                    bytes = bytes.get(n..)?;
                    value
                }
                wire @ (1 | 5) => {
                    let n = if wire == 1 { 8 } else { 4 };
                    let payload = bytes.get(..n)?;
                    bytes = bytes.get(n..)?;
                    self.payload_hash_of(role, payload)
                }
                2 => {
                    let (len, n) = varint::read(bytes)?;
                    let len = usize::try_from(len).ok()?;
                    let payload = bytes.get(n..n.checked_add(len)?)?;
                    bytes = bytes.get(n + len..)?;
                    if let Role::Nested(inner) = role {
                        if depth == MAX_DEPTH {
                            return None;
                        }
                        let d = self.whole_message(inner, payload, depth + 1)?;
                        sum = sum.wrapping_add(mix(self.seed, key, d, NESTED));
                        count += 1;
                        continue;
                    }
                    if matches!(role, Role::Skipped) {
                        // A map left out (labels, annotations) comes as a run of fields with
                        // one key, an entry each: the rest of the run is stepped over here,
                        // without the dispatch above for every entry. Left out, they change
                        // nothing, so the digest is the same; a malformed one is `None` as
                        // above.
                        bytes = skip_run(bytes, key)?;
                        continue;
                    }
                    self.payload_hash_of(role, payload)
                }
                _ => return None,
            };
            match role {
                Role::Ordered => chain = mix(self.seed, chain, key, h),
                Role::Entry => {
                    sum = sum.wrapping_add(mix(self.seed, key, h, ENTRY));
                    count += 1;
                }
                Role::Nested(_) | Role::Skipped => {}
            }
        }
        Some(mix(self.seed, chain, sum, count))
    }

    /// The hash of a whole payload, as the byte-wise path makes it: one call up to [`SHORT`]
    /// bytes, the streaming hasher past it; none for a field left out.
    #[inline(always)]
    fn payload_hash_of(&mut self, role: Role, payload: &[u8]) -> u64 {
        if matches!(role, Role::Skipped) {
            0
        } else if payload.len() <= SHORT {
            self.hash_short(payload)
        } else {
            self.hash_long(payload)
        }
    }

    /// A long payload's hash: rare (most long fields are labels and annotations, left out),
    /// so kept out of the loop.
    #[cold]
    #[inline(never)]
    fn hash_long(&mut self, payload: &[u8]) -> u64 {
        let long = self.fresh_long();
        long.write(payload);
        long.finish()
    }
}

/// `bytes` past the length-delimited fields with key `key` at its start (none, one or more);
/// `None` if one of them runs past the end or its length is not a varint.
#[inline]
fn skip_run(mut bytes: &[u8], key: u64) -> Option<&[u8]> {
    // One-byte keys only (field numbers under 16): every left-out map's.
    let k = match u8::try_from(key) {
        Ok(k) if k < 0x80 => k,
        _ => return Some(bytes),
    };
    while let Some((&first, rest)) = bytes.split_first()
        && first == k
    {
        let (len, n) = varint::read(rest)?;
        let end = usize::try_from(len).ok()?.checked_add(n)?;
        bytes = rest.get(end..)?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests;
