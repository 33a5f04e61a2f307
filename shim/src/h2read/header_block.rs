//! What the HPACK decoder (`hpack.rs`) hands over of a header block: the values of the header
//! fields its user asked for ([`Wanted`]), each cut to a cap, and the block's size.
//!
//! The decoder reads every field of every block (HPACK's dynamic table is shared by all the
//! streams of a direction, so skipping one block would garble the next) but keeps values only
//! for the wanted names: what a block costs is then the wanted values' caps, whatever the block's
//! length.

use std::sync::Arc;

/// Which of the reader's wanted fields ([`Wanted`]) a header name is, by its place in that
/// list; every other name is [`Name::OTHER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Name(pub(crate) u8);

impl Name {
    /// A name the reader does not keep.
    pub(crate) const OTHER: Self = Self(u8::MAX);
}

/// A value as far as the reader keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// Not kept: the name is not one the reader uses.
    Skipped,
    /// One of the static table's values.
    Static(&'static [u8]),
    /// The whole value (shared between the table and the fields of a block).
    Kept(Arc<[u8]>),
    /// Longer than the wanted field's cap: only its first bytes are kept.
    TooLong(Arc<[u8]>),
}

/// What RFC 9113 §6.5.2 counts per field in a header list's size, besides its name and value.
const FIELD_OVERHEAD: u64 = 32;

/// Most fields a reader may want.
pub const MAX_WANTED: usize = 8;

/// A header field whose value a reader keeps from every block, up to `keep` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WantedField {
    /// The field's name, lowercase as HTTP/2 sends it.
    pub name: &'static [u8],
    /// Most bytes of its value kept; a longer value is kept cut ([`FieldValue::Cut`]).
    pub keep: usize,
}

/// The header fields a reader keeps; a field's place in the list is its index in
/// [`HeaderBlock::get`].
#[derive(Debug, Clone, Copy)]
pub struct Wanted {
    fields: &'static [WantedField],
    /// The longest wanted name: a name longer than that is not wanted, whatever follows.
    longest: usize,
}

impl Wanted {
    /// The fields in `fields` (at most [`MAX_WANTED`]; more is a programming error, refused at
    /// compile time when used in a `const`).
    pub const fn new(fields: &'static [WantedField]) -> Self {
        assert!(fields.len() <= MAX_WANTED, "too many wanted header fields");
        let mut longest = 0;
        let mut i = 0;
        while i < fields.len() {
            if fields[i].name.len() > longest {
                longest = fields[i].name.len();
            }
            i += 1;
        }
        Self { fields, longest }
    }

    /// Which wanted field a name is.
    pub(crate) fn name_of(&self, name: &[u8]) -> Name {
        self.fields
            .iter()
            .position(|f| f.name == name)
            .map_or(Name::OTHER, |i| Name(i as u8))
    }

    /// Most bytes of a value of `name` kept (0: none).
    pub(crate) fn keep(&self, name: Name) -> usize {
        self.fields.get(usize::from(name.0)).map_or(0, |f| f.keep)
    }

    /// Bytes of a name read before it is known not to be wanted (one more than the longest
    /// wanted name tells a longer name apart).
    pub(crate) fn name_bytes(&self) -> usize {
        self.longest + 1
    }

    /// The largest cap of any wanted value.
    pub(crate) fn largest_keep(&self) -> usize {
        self.fields.iter().map(|f| f.keep).max().unwrap_or(0)
    }
}

/// A wanted field's value as a header block left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// The whole value.
    Whole(&'a [u8]),
    /// The value's first bytes: it was longer than its [`WantedField::keep`].
    Cut(&'a [u8]),
}

impl<'a> FieldValue<'a> {
    /// The bytes kept (the first ones when [`FieldValue::Cut`]).
    pub fn bytes(self) -> &'a [u8] {
        match self {
            Self::Whole(b) | Self::Cut(b) => b,
        }
    }

    /// The value if it was kept whole.
    pub fn whole(self) -> Option<&'a [u8]> {
        match self {
            Self::Whole(b) => Some(b),
            Self::Cut(_) => None,
        }
    }
}

/// What one header block said of the wanted fields (the last value of each), and its size.
#[derive(Debug, Default)]
pub struct HeaderBlock {
    values: [Option<Value>; MAX_WANTED],
    /// The header list's size as RFC 9113 §6.5.2 counts it (for SETTINGS_MAX_HEADER_LIST_SIZE).
    list_size: u64,
}

impl HeaderBlock {
    /// The value of the wanted field at `index` in [`Wanted`], if the block had it.
    pub fn get(&self, index: usize) -> Option<FieldValue<'_>> {
        self.values.get(index)?.as_ref().map(|v| match v {
            Value::Static(b) => FieldValue::Whole(b),
            Value::Kept(b) => FieldValue::Whole(b),
            Value::TooLong(b) => FieldValue::Cut(b),
            Value::Skipped => FieldValue::Cut(&[]),
        })
    }

    /// The header list's size as SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC 9113 §6.5.2).
    pub fn list_size(&self) -> u64 {
        self.list_size
    }

    /// A decoded field: counted in the size, and kept if it is wanted.
    pub(crate) fn add(&mut self, name: Name, name_len: u64, value: Value, value_len: u64) {
        self.list_size = self
            .list_size
            .saturating_add(name_len + value_len + FIELD_OVERHEAD);
        if let Some(slot) = self.values.get_mut(usize::from(name.0)) {
            *slot = Some(value);
        }
    }
}
