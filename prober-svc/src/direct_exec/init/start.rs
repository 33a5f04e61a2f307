//! What a helper learns at its start, before any plan.

use super::failure::{Res, err};
use super::namespaces::{NAMESPACES, ns_id};
use super::privileges;
use crate::direct_exec::sys;

/// What a helper learns before any plan, the same for every probe: a helper started for one
/// probe learns it at its start; the zygote learns it once, and its children inherit it with
/// the fork instead of reading `/proc` again on the probe's path.
///
/// Facts only, no descriptor: an open file the zygote held would be one open file description
/// shared by the commands of every container (`/dev/null` becomes the command's stdin), whose
/// flags one of them could change for the others. Each helper opens its own.
pub(super) struct Start {
    /// This process's own namespaces, by [`NAMESPACES`] order (`None`: not found).
    pub(super) own: Vec<Option<(u64, u64)>>,
    /// This process's own user namespace (`None`: not found).
    pub(super) own_user: Option<(u64, u64)>,
    /// The signal dispositions a freshly started helper has.
    pub(super) signals: sys::Dispositions,
    /// The reaper's seccomp filter, compiled ([`privileges::reaper_filter`]).
    pub(super) reaper_filter: Vec<u8>,
}

impl Start {
    /// Reads it, once this process is checked to be single-threaded.
    pub(super) fn learn() -> Res<Self> {
        sys::assert_single_threaded().map_err(err("helper"))?;
        Ok(Self {
            own: NAMESPACES
                .iter()
                .map(|(_, own, _)| ns_id(&format!("/proc/self/ns/{own}")))
                .collect(),
            own_user: ns_id("/proc/self/ns/user"),
            signals: sys::Dispositions::of_self(),
            reaper_filter: privileges::reaper_filter()?,
        })
    }
}
