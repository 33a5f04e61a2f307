//! How much of each category one pass found, before the listing caps.

use super::category::Category;

/// Per category: everything found (actions, findings, deferred), blocked, and foreign, before
/// any listing cap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// One entry for every category, in [`Category::ALL`] order.
    pub by_category: Vec<CategoryCount>,
}

/// The counts of one category in one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CategoryCount {
    /// The category.
    pub category: Category,
    /// Orphans and leaks found (planned, waiting, blocked or reported).
    pub found: u64,
    /// Of those, kept by a safety rule.
    pub blocked: u64,
    /// Entries under the category's root that are not in kubelet's shapes (never acted on): many of
    /// them usually means a root flag points at the wrong directory.
    pub foreign: u64,
}

impl Counts {
    pub(super) fn new() -> Self {
        Self {
            by_category: Category::ALL
                .iter()
                .map(|&category| CategoryCount {
                    category,
                    found: 0,
                    blocked: 0,
                    foreign: 0,
                })
                .collect(),
        }
    }

    fn entry(&mut self, cat: Category) -> Option<&mut CategoryCount> {
        self.by_category.iter_mut().find(|e| e.category == cat)
    }

    pub(super) fn add(&mut self, cat: Category, blocked: bool) {
        if let Some(e) = self.entry(cat) {
            e.found += 1;
            e.blocked += u64::from(blocked);
        }
    }

    pub(super) fn add_foreign(&mut self, cat: Category, n: u64) {
        if let Some(e) = self.entry(cat) {
            e.foreign += n;
        }
    }
}
