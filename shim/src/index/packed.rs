//! The index's tables, each entry kept in its protobuf encoding.
//!
//! A decoded sandbox or container is a tree of small allocations: every label and annotation
//! key and value, two hash tables with their free buckets, the IDs, the image. kubelet writes
//! eight label and annotation entries per container, and their allocator headers and table slack
//! cost more than their bytes. Encoded, an entry is one allocation holding its bytes alone.
//!
//! An entry is decoded when it is read and encoded again when it changed. The index is folded on
//! the decoder thread, never on the relay's path, and most observations touch one entry. The
//! whole table is decoded only for a snapshot; a scan over every entry (a sandbox's orphans, what
//! a relist no longer lists) and a relist's check of one decode a smaller message of the few
//! fields they need ([`Table::scan`], [`Table::view`]), which skips the rest of the bytes
//! without copying them.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use prost::Message;

/// One entry: the encoding of a `T`.
struct Packed<T> {
    bytes: Box<[u8]>,
    message: PhantomData<fn() -> T>,
}

impl<T: Message + Default> Packed<T> {
    fn pack(value: &T) -> Self {
        Self {
            bytes: value.encode_to_vec().into_boxed_slice(),
            message: PhantomData,
        }
    }

    fn unpack(&self) -> T {
        // Only `pack` makes these bytes, from a `T`: prost decodes what it encoded.
        T::decode(&*self.bytes).expect("an index entry decodes as the message it was encoded from")
    }

    /// The bytes decoded as `V`, a message whose fields are some of `T`'s.
    fn view<V: Message + Default>(&self) -> V {
        V::decode(&*self.bytes).expect("an index entry decodes as a view of its fields")
    }
}

/// Entries by ID.
pub(super) struct Table<T> {
    entries: HashMap<String, Packed<T>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }
}

impl<T> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl<T: Message + Default> Table<T> {
    /// Number of entries.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether `id` has an entry.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.entries.contains_key(id)
    }

    /// A copy of the entry for `id`.
    pub(super) fn get(&self, id: &str) -> Option<T> {
        self.entries.get(id).map(Packed::unpack)
    }

    /// The entry for `id`, to change in place: written back when the guard drops, if it was
    /// borrowed mutably.
    pub(super) fn get_mut(&mut self, id: &str) -> Option<Unpacked<'_, T>> {
        self.entries.get_mut(id).map(|slot| Unpacked {
            value: slot.unpack(),
            slot,
            changed: false,
        })
    }

    /// Adds or replaces the entry for `id`.
    pub(super) fn insert(&mut self, id: String, value: &T) {
        self.entries.insert(id, Packed::pack(value));
    }

    /// Takes the entry for `id` out.
    pub(super) fn remove(&mut self, id: &str) -> Option<T> {
        self.entries.remove(id).as_ref().map(Packed::unpack)
    }

    /// Every ID, in no order.
    pub(super) fn ids(&self) -> impl Iterator<Item = &String> {
        self.entries.keys()
    }

    /// Every entry, decoded one at a time, in no order.
    pub(super) fn values(&self) -> impl Iterator<Item = T> {
        self.entries.values().map(Packed::unpack)
    }

    /// The entry for `id` decoded as `V`: a message declaring some of `T`'s fields with the same
    /// tags, so that decoding skips the others (protobuf's unknown fields) instead of copying
    /// them.
    pub(super) fn view<V: Message + Default>(&self, id: &str) -> Option<V> {
        self.entries.get(id).map(Packed::view)
    }

    /// Every entry with its ID, decoded as `V` (see [`Table::view`]).
    pub(super) fn scan<V: Message + Default>(&self) -> impl Iterator<Item = (&String, V)> {
        self.entries.iter().map(|(id, p)| (id, p.view()))
    }
}

/// An entry decoded for change (see [`Table::get_mut`]), as `BinaryHeap`'s `PeekMut` is: the
/// table is updated when this drops, so no path can change an entry and forget to store it.
pub(super) struct Unpacked<'a, T: Message + Default> {
    slot: &'a mut Packed<T>,
    value: T,
    changed: bool,
}

impl<T: Message + Default> Unpacked<'_, T> {
    /// Drops the guard without storing: for a value that was changed and came out equal to what
    /// was read, which need not be encoded again.
    pub(super) fn unchanged(mut self) {
        self.changed = false;
    }
}

impl<T: Message + Default> Deref for Unpacked<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Message + Default> DerefMut for Unpacked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.changed = true;
        &mut self.value
    }
}

impl<T: Message + Default> Drop for Unpacked<'_, T> {
    fn drop(&mut self) {
        if self.changed {
            *self.slot = Packed::pack(&self.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use podward_api::shim::v1::Container;

    use super::Table;

    fn container(id: &str) -> Container {
        Container {
            id: id.to_owned(),
            labels: HashMap::from([("k".to_owned(), "v".to_owned())]),
            ..Container::default()
        }
    }

    /// A table holding `container("a")`.
    fn table_of_a() -> Table<Container> {
        let mut t = Table::default();
        t.insert("a".to_owned(), &container("a"));
        t
    }

    #[test]
    fn an_entry_reads_back_as_it_was_stored() {
        let mut t = Table::default();
        let c = container("a");
        t.insert("a".to_owned(), &c);
        assert_eq!(t.get("a"), Some(c.clone()));
        assert_eq!(t.values().collect::<Vec<_>>(), vec![c.clone()]);
        assert_eq!(t.remove("a"), Some(c));
        assert_eq!(t.len(), 0);
        assert_eq!(t.get("a"), None);
    }

    #[test]
    fn a_change_through_the_guard_is_stored_when_it_drops() {
        let mut t = table_of_a();
        if let Some(mut c) = t.get_mut("a") {
            c.exit_code = 137;
            c.labels.insert("k2".to_owned(), "v2".to_owned());
            // Not stored yet: the guard holds the change.
        }
        let c = t.get("a").unwrap_or_default();
        assert_eq!(c.exit_code, 137);
        assert_eq!(c.labels.len(), 2);
    }

    #[test]
    fn a_guard_dropped_as_unchanged_stores_nothing() {
        let mut t = table_of_a();
        if let Some(mut c) = t.get_mut("a") {
            c.exit_code = 1;
            c.unchanged();
        }
        assert_eq!(t.get("a").map(|c| c.exit_code), Some(0));
    }

    #[test]
    fn a_read_through_the_guard_leaves_the_bytes_as_they_were() {
        let mut t = table_of_a();
        let before = t.entries["a"].bytes.as_ptr();
        if let Some(c) = t.get_mut("a") {
            assert_eq!(c.id, "a");
        }
        assert_eq!(t.entries["a"].bytes.as_ptr(), before);
    }
}
