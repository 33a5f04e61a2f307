//! A protobuf varint read a byte at a time, across however many parts a message arrives in.

/// A varint being read across however many parts it arrives in.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Varint {
    value: u64,
    shift: u32,
}

impl Varint {
    /// Whether no byte of a varint has been read yet.
    pub(super) fn is_empty(&self) -> bool {
        self.shift == 0
    }

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

/// A varint that lies whole at the start of `bytes`: its value and length, as [`Varint::push`]
/// would read it byte by byte. None when it does not end within `bytes` or within the ten bytes
/// `push` accepts (then it is read byte by byte, across parts, or found too long).
pub(super) fn whole(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `whole` must read what `push` reads, byte for byte, or the digest would depend on how
    /// the body was split.
    #[test]
    fn whole_reads_what_push_reads() {
        let cases: &[&[u8]] = &[
            &[0],
            &[1, 0xff],
            &[0x96, 0x01],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            &[
                0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00,
            ],
            &[0x80, 0x80],
            &[],
        ];
        for bytes in cases {
            let mut v = Varint::default();
            let mut by_push = None;
            for (i, &b) in bytes.iter().enumerate() {
                match v.push(b) {
                    Ok(Some(value)) => {
                        by_push = Some((value, i + 1));
                        break;
                    }
                    Ok(None) => {}
                    Err(()) => break,
                }
            }
            assert_eq!(whole(bytes), by_push, "{bytes:x?}");
        }
    }
}
