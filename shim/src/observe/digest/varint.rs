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
}
