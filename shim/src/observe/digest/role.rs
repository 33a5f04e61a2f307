//! What becomes of a field's bytes in a digest, by the shape of the message that holds it.

use super::shape::Shape;

/// What becomes of a field's bytes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Role {
    /// Hashed in order with the message's other plain fields.
    Ordered,
    /// A map entry: digested alone and summed.
    Entry,
    /// A message of this shape: digested as one and summed.
    Nested(&'static Shape),
    /// Left out.
    Skipped,
}

impl Role {
    /// What becomes of the field with `key` in a message of `shape`.
    #[inline(always)]
    pub(super) fn of(shape: &'static Shape, key: u64) -> Self {
        let number = key >> 3;
        if number < 64 {
            let bit = 1 << number;
            return if shape.bits.ignored & bit != 0 {
                Role::Skipped
            } else if key & 7 != 2 {
                Role::Ordered
            } else if shape.bits.nested & bit != 0 {
                shape.nested(number).map_or(Role::Ordered, Role::Nested)
            } else if shape.bits.maps & bit != 0 {
                Role::Entry
            } else {
                Role::Ordered
            };
        }
        Self::of_lists(shape, key)
    }

    /// [`Role::of`] from the shape's lists rather than its bit sets: for field numbers past 63,
    /// which no shape names, and for the test that the two agree.
    pub(super) fn of_lists(shape: &'static Shape, key: u64) -> Self {
        let number = key >> 3;
        if shape.ignored.contains(&number) {
            Role::Skipped
        } else if key & 7 != 2 {
            Role::Ordered
        } else if let Some(shape) = shape.nested(number) {
            Role::Nested(shape)
        } else if shape.maps.contains(&number) {
            Role::Entry
        } else {
            Role::Ordered
        }
    }
}
