//! A pod's live view as its workers share it: replaced whole by the manager, read by every worker
//! at every tick.
//!
//! Each replacement bumps a version. A worker keeps the view it last read with its version, and
//! at its tick only loads the version: while it is unchanged, which is nearly always, the worker
//! neither takes the lock nor touches the view's reference count. Both would be atomic writes to
//! lines shared with the pod's other workers, on other threads, at every probe of the node.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::model::PodInfo;

/// The current view of one pod, and how many times it was replaced.
#[derive(Debug)]
pub struct PodView {
    current: RwLock<Arc<PodInfo>>,
    version: AtomicU64,
}

impl PodView {
    /// A view of `pod`, at version 0.
    pub fn new(pod: PodInfo) -> Self {
        Self {
            current: RwLock::new(Arc::new(pod)),
            version: AtomicU64::new(0),
        }
    }

    /// The current view, locked for reading.
    pub fn read(&self) -> RwLockReadGuard<'_, Arc<PodInfo>> {
        self.current.read()
    }

    /// The current view, locked for replacing; the version moves on when the guard is dropped.
    pub fn write(&self) -> PodWrite<'_> {
        PodWrite {
            guard: self.current.write(),
            version: &self.version,
        }
    }

    /// How many times the view was replaced. Loaded before [`PodView::read`], a version equal to
    /// the one a copy was read at says that copy is still the current view.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}

/// A write lock on a [`PodView`]; moves the view's version on when dropped.
pub struct PodWrite<'a> {
    guard: RwLockWriteGuard<'a, Arc<PodInfo>>,
    version: &'a AtomicU64,
}

impl Deref for PodWrite<'_> {
    type Target = Arc<PodInfo>;

    fn deref(&self) -> &Arc<PodInfo> {
        &self.guard
    }
}

impl DerefMut for PodWrite<'_> {
    fn deref_mut(&mut self) -> &mut Arc<PodInfo> {
        &mut self.guard
    }
}

impl Drop for PodWrite<'_> {
    fn drop(&mut self) {
        // Still under the write lock (the guard is dropped after this): a reader that sees the
        // new version and then takes the read lock gets the new view.
        self.version.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn pod(name: &str) -> PodInfo {
        PodInfo {
            uid: "u".into(),
            name: name.into(),
            namespace: "ns".into(),
            sandbox_id: "s".into(),
            sandbox_created_at_ns: 1,
            ip: None,
            probes_annotation: None,
            stop_requested_at_ns: 0,
            containers: BTreeMap::new(),
            api: None,
        }
    }

    #[test]
    fn every_replacement_moves_the_version_on_and_a_read_sees_it() {
        let view = PodView::new(pod("a"));
        let v0 = view.version();
        assert_eq!(view.read().name, "a");
        *view.write() = Arc::new(pod("b"));
        let v1 = view.version();
        assert_ne!(v0, v1, "a replaced view must not keep its version");
        assert_eq!(view.read().name, "b");
        {
            let mut w = view.write();
            let mut p = PodInfo::clone(&w);
            p.name = "c".into();
            *w = Arc::new(p);
        }
        assert_ne!(view.version(), v1);
        assert_eq!(view.read().name, "c");
    }
}
