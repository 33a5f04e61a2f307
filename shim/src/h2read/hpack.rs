//! A streaming HPACK decoder (RFC 7541) for the passive reader: header blocks of any length,
//! fed in fragments split anywhere (HEADERS and CONTINUATION payloads as they arrive), in time
//! linear in the block and in memory bounded by the dynamic table size the decoding peer
//! allows, whatever the block's length.
//!
//! Hand-rolled because no maintained crate decodes a header block without holding all of it:
//! `httlib-hpack`, `hpack` and `loona-hpack`/`fluke-hpack` take the whole block as one slice and
//! return every field as an owned copy (an indexed field of 4 KB referenced 60,000 times in a
//! block is 240 MB of copies), and h2's decoder is not public. Here every field is reduced, as it
//! is decoded, to what the reader's user wants of it ([`Wanted`]: a few names, each value up to a
//! cap) and its size, into a [`HeaderBlock`]. A table entry keeps its size and, for the wanted
//! names only, its (capped) value, shared by reference, so a reference to an entry copies
//! nothing.
//!
//! What it refuses is what every conforming peer refuses as a COMPRESSION_ERROR, which ends the
//! connection anyway: an index outside the tables, a table size above the decoding peer's
//! SETTINGS_HEADER_TABLE_SIZE, an integer past 2^62, EOS or bad padding in a Huffman string, a
//! block that ends inside a field. Nothing else: no cap on a string's or a block's length.

mod huffman;
pub(super) mod table;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use huffman::Huffman;
pub use huffman::HuffmanError;
use table::{DynamicTable, Entry};

use super::header_block::{HeaderBlock, Name, Value, Wanted};

/// HPACK's initial dynamic table size (RFC 7541 §4.2, HTTP/2's SETTINGS_HEADER_TABLE_SIZE
/// default).
pub(crate) const INITIAL_TABLE_SIZE: u64 = 4096;

/// Why a header block could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// Index 0, or an index past the static and dynamic tables.
    #[error("index {0} is outside the tables")]
    Index(u64),
    /// An integer encoded in more bytes than any peer accepts.
    #[error("integer too large")]
    Integer,
    /// A dynamic table size update above what the decoding peer allows.
    #[error("table size update to {asked} above the allowed {allowed}")]
    TableSize {
        /// The size asked for.
        asked: u64,
        /// The decoding peer's SETTINGS_HEADER_TABLE_SIZE.
        allowed: u64,
    },
    /// A Huffman string that does not decode.
    #[error(transparent)]
    Huffman(#[from] HuffmanError),
    /// The block ended inside a field.
    #[error("header block ends inside a field")]
    Truncated,
}

/// What comes next in the block.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// The first byte of a representation.
    Start,
    /// More bytes of the representation's first integer.
    Int { kind: Kind, value: u64, shift: u32 },
    /// The first byte of a string (Huffman flag and length prefix).
    StrStart { part: Part },
    /// More bytes of a string's length.
    StrLen {
        part: Part,
        huffman: bool,
        value: u64,
        shift: u32,
    },
    /// `left` bytes of a string.
    Str {
        part: Part,
        left: u64,
        huffman: Option<Huffman>,
    },
}

/// A representation (RFC 7541 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Indexed,
    /// Literal with incremental indexing: added to the table.
    Incremental,
    /// Literal without indexing, or never indexed.
    NotIndexed,
    SizeUpdate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Name,
    Value,
}

/// The literal being read.
#[derive(Debug)]
struct Literal {
    kind: Kind,
    name: Name,
    name_len: u64,
    /// The current string's decoded length.
    len: u64,
    /// Its first bytes, as many as the reader keeps.
    kept: Vec<u8>,
    keep: usize,
}

/// One direction's HPACK decoding state: its dynamic table and the block in progress.
#[derive(Debug)]
pub(crate) struct BlockDecoder {
    wanted: Wanted,
    table: DynamicTable,
    step: Step,
    literal: Literal,
    /// The block being decoded, as far as it is kept (values shared, nothing copied per
    /// reference).
    found: HeaderBlock,
}

impl BlockDecoder {
    /// A decoder with HPACK's initial table, keeping the `wanted` fields.
    pub(crate) fn new(wanted: Wanted) -> Self {
        Self {
            wanted,
            table: DynamicTable::new(INITIAL_TABLE_SIZE, &wanted),
            step: Step::Start,
            literal: Literal {
                kind: Kind::NotIndexed,
                name: Name::OTHER,
                name_len: 0,
                len: 0,
                kept: Vec::new(),
                keep: 0,
            },
            found: HeaderBlock::default(),
        }
    }

    /// The dynamic table's current maximum size.
    #[cfg(test)]
    pub(crate) fn table_max_size(&self) -> u64 {
        self.table.max_size()
    }

    /// Decodes the next fragment of the current block. `allowed_table` is the largest dynamic
    /// table the decoding peer has allowed (its SETTINGS_HEADER_TABLE_SIZE).
    pub(crate) fn feed(&mut self, mut input: &[u8], allowed_table: u64) -> Result<(), HpackError> {
        while let Some((&b, rest)) = input.split_first() {
            match self.step {
                Step::Start => {
                    input = rest;
                    self.representation(b, allowed_table)?;
                }
                Step::Int { kind, value, shift } => {
                    input = rest;
                    match int_more(value, shift, b)? {
                        (value, None) => self.int_done(kind, value, allowed_table)?,
                        (value, Some(shift)) => self.step = Step::Int { kind, value, shift },
                    }
                }
                Step::StrStart { part } => {
                    input = rest;
                    let huffman = b & 0x80 != 0;
                    let value = u64::from(b & 0x7f);
                    if value < 0x7f {
                        self.str_begin(part, huffman, value)?;
                    } else {
                        self.step = Step::StrLen {
                            part,
                            huffman,
                            value,
                            shift: 0,
                        };
                    }
                }
                Step::StrLen {
                    part,
                    huffman,
                    value,
                    shift,
                } => {
                    input = rest;
                    match int_more(value, shift, b)? {
                        (value, None) => self.str_begin(part, huffman, value)?,
                        (value, Some(shift)) => {
                            self.step = Step::StrLen {
                                part,
                                huffman,
                                value,
                                shift,
                            }
                        }
                    }
                }
                Step::Str {
                    part,
                    left,
                    huffman,
                } => input = self.read_str(input, part, left, huffman)?,
            }
        }
        Ok(())
    }

    /// The first byte of a representation (RFC 7541 §6): its kind and its integer's prefix.
    fn representation(&mut self, b: u8, allowed_table: u64) -> Result<(), HpackError> {
        let (kind, prefix) = if b & 0x80 != 0 {
            (Kind::Indexed, 7)
        } else if b & 0x40 != 0 {
            (Kind::Incremental, 6)
        } else if b & 0x20 != 0 {
            (Kind::SizeUpdate, 5)
        } else {
            (Kind::NotIndexed, 4)
        };
        let mask = (1u8 << prefix) - 1;
        let value = u64::from(b & mask);
        if value < u64::from(mask) {
            self.int_done(kind, value, allowed_table)?;
        } else {
            self.step = Step::Int {
                kind,
                value,
                shift: 0,
            };
        }
        Ok(())
    }

    /// As many of a string's `left` bytes as `input` has; returns the rest of `input`.
    fn read_str<'a>(
        &mut self,
        input: &'a [u8],
        part: Part,
        left: u64,
        mut huffman: Option<Huffman>,
    ) -> Result<&'a [u8], HpackError> {
        let n = usize::try_from(left).map_or(input.len(), |l| l.min(input.len()));
        let (bytes, rest) = input.split_at(n);
        self.str_bytes(bytes, huffman.as_mut())?;
        let left = left - n as u64;
        if left > 0 {
            self.step = Step::Str {
                part,
                left,
                huffman,
            };
        } else {
            if let Some(h) = huffman {
                h.finish()?;
            }
            self.str_done(part);
        }
        Ok(rest)
    }

    /// The block ended: what it said. The decoder is then ready for the next block.
    pub(crate) fn finish(&mut self) -> Result<HeaderBlock, HpackError> {
        let found = std::mem::take(&mut self.found);
        if !matches!(self.step, Step::Start) {
            self.step = Step::Start;
            return Err(HpackError::Truncated);
        }
        Ok(found)
    }

    fn int_done(&mut self, kind: Kind, value: u64, allowed_table: u64) -> Result<(), HpackError> {
        self.step = Step::Start;
        match kind {
            Kind::Indexed => {
                let e = self.lookup(value)?;
                self.found.add(e.name, e.name_len, e.value, e.value_len);
            }
            Kind::Incremental | Kind::NotIndexed => {
                self.literal.kind = kind;
                if value == 0 {
                    self.step = Step::StrStart { part: Part::Name };
                } else {
                    let e = self.lookup(value)?;
                    self.literal.name = e.name;
                    self.literal.name_len = e.name_len;
                    self.step = Step::StrStart { part: Part::Value };
                }
            }
            Kind::SizeUpdate => {
                if value > allowed_table {
                    return Err(HpackError::TableSize {
                        asked: value,
                        allowed: allowed_table,
                    });
                }
                self.table.set_max_size(value);
            }
        }
        Ok(())
    }

    fn lookup(&self, index: u64) -> Result<Entry, HpackError> {
        self.table.get(index).ok_or(HpackError::Index(index))
    }

    fn str_begin(&mut self, part: Part, huffman: bool, len: u64) -> Result<(), HpackError> {
        let l = &mut self.literal;
        l.len = 0;
        l.kept.clear();
        l.keep = match part {
            Part::Name => self.wanted.name_bytes(),
            Part::Value => self.wanted.keep(l.name),
        };
        self.step = Step::Str {
            part,
            left: len,
            huffman: huffman.then(Huffman::default),
        };
        if len == 0 {
            // Nothing to read: the string is complete (an empty Huffman string is valid).
            self.str_done(part);
        }
        Ok(())
    }

    fn str_bytes(&mut self, bytes: &[u8], huffman: Option<&mut Huffman>) -> Result<(), HpackError> {
        let l = &mut self.literal;
        match huffman {
            None => {
                l.len += bytes.len() as u64;
                let room = l.keep.saturating_sub(l.kept.len());
                l.kept.extend_from_slice(&bytes[..room.min(bytes.len())]);
            }
            Some(h) => {
                let (len, kept, keep) = (&mut l.len, &mut l.kept, l.keep);
                h.feed(bytes, |symbol| {
                    *len += 1;
                    if kept.len() < keep {
                        kept.push(symbol);
                    }
                })?;
            }
        }
        Ok(())
    }

    fn str_done(&mut self, part: Part) {
        self.step = Step::Start;
        let l = &mut self.literal;
        match part {
            Part::Name => {
                l.name = self.wanted.name_of(&l.kept);
                l.name_len = l.len;
                self.step = Step::StrStart { part: Part::Value };
            }
            Part::Value => {
                let value = if l.keep == 0 {
                    Value::Skipped
                } else if l.len <= l.keep as u64 {
                    Value::Kept(Arc::from(&l.kept[..]))
                } else {
                    Value::TooLong(Arc::from(&l.kept[..]))
                };
                if l.kind == Kind::Incremental {
                    self.table.insert(Entry {
                        name: l.name,
                        name_len: l.name_len,
                        value: value.clone(),
                        value_len: l.len,
                    });
                }
                self.found.add(l.name, l.name_len, value, l.len);
                // A long value must not leave a large buffer behind.
                l.kept.shrink_to(self.wanted.largest_keep());
            }
        }
    }
}

/// One more byte of an HPACK integer (RFC 7541 §5.1): the value so far and, if more bytes
/// follow, the shift for the next one.
fn int_more(value: u64, shift: u32, b: u8) -> Result<(u64, Option<u32>), HpackError> {
    // Nine continuation bytes (63 bits) is past every peer's limit (h2 stops at 5, Go at 63
    // bits), so the sum below cannot overflow.
    if shift > 56 {
        return Err(HpackError::Integer);
    }
    let value = value + (u64::from(b & 0x7f) << shift);
    if b & 0x80 == 0 {
        Ok((value, None))
    } else {
        Ok((value, Some(shift + 7)))
    }
}
