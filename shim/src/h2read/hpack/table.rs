//! HPACK's indexing tables (RFC 7541 §2.3): the static table and one direction's dynamic
//! table, holding for each entry only what the reader may need of it.
//!
//! An entry keeps its size (name and value lengths + 32, what the encoder counts) and which of
//! the reader's names it has; a value only for those names, and only up to a cap. So the table
//! costs at most about what the encoder's table size allows, whatever the entries hold, and a
//! reference to an entry copies nothing (values are shared).

use std::collections::VecDeque;

use super::super::header_block::{Name, Value, Wanted};

/// RFC 7541 §4.1: an entry's size is its name and value lengths plus 32.
pub(crate) const ENTRY_OVERHEAD: u64 = 32;

/// An entry of either table.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) name: Name,
    pub(crate) name_len: u64,
    pub(crate) value: Value,
    pub(crate) value_len: u64,
}

impl Entry {
    /// Its size as HPACK counts it.
    pub(crate) fn size(&self) -> u64 {
        self.name_len + self.value_len + ENTRY_OVERHEAD
    }
}

/// RFC 7541 Appendix A: the names and values of the static table.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The static table's names as the reader's [`Wanted`] fields name them.
fn static_names(wanted: &Wanted) -> [Name; STATIC.len()] {
    std::array::from_fn(|i| wanted.name_of(STATIC[i].0.as_bytes()))
}

fn static_entry(names: &[Name; STATIC.len()], index: usize) -> Option<Entry> {
    let i = index.checked_sub(1)?;
    let (name, value) = STATIC.get(i)?;
    let tag = names[i];
    Some(Entry {
        name: tag,
        name_len: name.len() as u64,
        value: if tag == Name::OTHER {
            Value::Skipped
        } else {
            Value::Static(value.as_bytes())
        },
        value_len: value.len() as u64,
    })
}

/// One direction's dynamic table (newest entry first, as HPACK indexes it).
#[derive(Debug)]
pub(crate) struct DynamicTable {
    /// The static table's names, as the reader's wanted fields name them.
    static_names: [Name; STATIC.len()],
    entries: VecDeque<Entry>,
    size: u64,
    max_size: u64,
}

impl DynamicTable {
    /// An empty table of `max_size` bytes, keeping values of the `wanted` fields.
    pub(crate) fn new(max_size: u64, wanted: &Wanted) -> Self {
        Self {
            static_names: static_names(wanted),
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    /// The current maximum size (the last dynamic table size update).
    #[cfg(test)]
    pub(crate) fn max_size(&self) -> u64 {
        self.max_size
    }

    /// The entries' total size.
    #[cfg(test)]
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Entries held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry at HPACK `index` (1..=61 static, then dynamic, newest first).
    pub(crate) fn get(&self, index: u64) -> Option<Entry> {
        let index = usize::try_from(index).ok()?;
        if index <= STATIC.len() {
            return static_entry(&self.static_names, index);
        }
        self.entries.get(index - STATIC.len() - 1).cloned()
    }

    /// A dynamic table size update (RFC 7541 §6.3), already checked against what the decoding
    /// peer allows.
    pub(crate) fn set_max_size(&mut self, max: u64) {
        self.max_size = max;
        self.evict_to(max);
        if self.entries.capacity() > 2 * self.entries.len() + 16 {
            self.entries.shrink_to_fit();
        }
    }

    /// Adds an entry (RFC 7541 §4.4: one larger than the whole table empties it).
    pub(crate) fn insert(&mut self, entry: Entry) {
        let size = entry.size();
        if size > self.max_size {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - size);
        self.size += size;
        self.entries.push_front(entry);
    }

    fn evict_to(&mut self, room: u64) {
        while self.size > room {
            match self.entries.pop_back() {
                Some(e) => self.size -= e.size(),
                None => {
                    self.size = 0;
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::h2read::WantedField;

    const WANTED: Wanted = Wanted::new(&[
        WantedField {
            name: b":path",
            keep: 1024,
        },
        WantedField {
            name: b"content-type",
            keep: 64,
        },
    ]);

    #[test]
    fn the_static_table_agrees_with_another_implementation() {
        let theirs = httlib_hpack::table::Table::default();
        let names = static_names(&WANTED);
        for i in 1..=61u32 {
            let (name, value) = theirs.get(i).expect("their entry");
            let e = static_entry(&names, i as usize).expect("entry");
            assert_eq!(e.name_len, name.len() as u64, "{i}");
            assert_eq!(e.value_len, value.len() as u64, "{i}");
            assert_eq!(e.name, WANTED.name_of(name), "{i}");
        }
        assert!(static_entry(&names, 0).is_none());
        assert!(static_entry(&names, 62).is_none());
    }

    #[test]
    fn entries_are_evicted_oldest_first_and_an_oversized_one_empties_the_table() {
        let e = |n: u64| Entry {
            name: Name::OTHER,
            name_len: n,
            value: Value::Skipped,
            value_len: 0,
        };
        let mut t = DynamicTable::new(100, &WANTED);
        t.insert(e(10)); // 42
        t.insert(e(20)); // 52
        assert_eq!(t.len(), 2);
        t.insert(e(1)); // 33: the oldest (42) goes
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(62).expect("newest").name_len, 1);
        assert_eq!(t.get(63).expect("older").name_len, 20);
        assert!(t.get(64).is_none());
        t.insert(e(100));
        assert_eq!(t.len(), 0);
        t.insert(e(1));
        t.set_max_size(0);
        assert_eq!(t.len(), 0);
    }
}
