//! A protobuf varint read a byte at a time, across however many parts a message arrives in.

/// A varint being read across however many parts it arrives in.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Varint {
    value: u64,
    shift: u32,
}

impl Varint {
    /// Adds a byte; the value once it is complete. Longer than ten bytes is an error.
    pub(super) fn push(&mut self, b: u8) -> Result<Option<u64>, ()> {
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

    /// Whether no byte of a varint has been read yet.
    pub(super) fn is_empty(&self) -> bool {
        self.shift == 0
    }
}

/// The varint at the start of `bytes` and its length, if it ends within them. The same value
/// as [`Varint::push`] byte by byte (bits past the 64th dropped); `None` for a varint that runs
/// past `bytes` or past ten bytes, which the byte-wise reader then takes (as a varint cut by
/// the part's end, or as an error).
#[inline]
pub(super) fn read(bytes: &[u8]) -> Option<(u64, usize)> {
    // Most keys and lengths are one byte.
    if let Some(&b) = bytes.first()
        && b < 0x80
    {
        return Some((u64::from(b), 1));
    }
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}
