//! Giving freed heap memory back to the kernel.
//!
//! glibc's allocator returns freed memory to the kernel only from the top of its heap (and only
//! past `M_TRIM_THRESHOLD`); memory freed below a block still in use stays resident. After a
//! multi-MiB List the heap has megabytes free under the index's long-lived strings: the answer's
//! read buffers and the decoded copy that was folded into the index. `malloc_trim(0)` gives every
//! wholly free page of every arena back (`madvise(MADV_DONTNEED)`), wherever it lies.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Gives the wholly free pages of the heap back to the kernel (glibc only; elsewhere nothing).
/// Costs a walk of the allocator's free lists and, later, a page fault for each page given back
/// that is used again: call it when a large burst of memory has been freed, not per call.
pub(crate) fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only releases pages glibc itself knows to be
    // free; it is thread-safe (it locks each arena in turn).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Heap freed at its top that glibc keeps rather than returns at once (`M_TRIM_THRESHOLD`;
/// glibc's default is 128 KiB). Freed memory is given back by [`release_free_heap`] once large
/// answers stop coming; until then a relayed multi-MiB answer's read buffers are reused by the
/// next one instead of being returned and faulted back in page by page (page faults were a
/// visible share of the shim's CPU samples during large Lists, docs/benchmarks.md). Bounded so
/// that a burst no large answer announced still goes back at once.
const TRIM_THRESHOLD: libc::c_int = 8 << 20;

/// Tunes glibc's allocator for the shim (elsewhere nothing): the trim threshold above, and one
/// arena. With the default (eight per core), the decoder thread gets an arena of its own, and
/// each arena keeps its own partly used pages, so one arena holds less RSS for the same index
/// (docs/benchmarks.md, Shim). The two threads rarely allocate at the same
/// moment; with one arena no figure of the bench got worse. Call once, at start, before the
/// decoder thread exists.
pub(crate) fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes two integers and changes tunables of the allocator under its lock.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// How long after a large transient the freed heap is given back: long enough for a snapshot to
/// have been encoded and sent, and longer than kubelet's relist period (1 s), so that a
/// multi-MiB List coming back every second keeps the memory its bytes need instead of faulting
/// it back in each time.
pub(crate) const RELEASE_AFTER: Duration = Duration::from_secs(2);

/// Gives the freed heap back [`RELEASE_AFTER`] a large transient was built on the runtime (a
/// snapshot of the whole index, a rebuild), once for all those requested meanwhile. Outside a
/// tokio runtime it does nothing (the decoder thread releases on its own).
#[derive(Clone, Debug, Default)]
pub(crate) struct Release {
    pending: Arc<AtomicBool>,
}

impl Release {
    /// Schedules a release unless one is pending.
    pub(crate) fn soon(&self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let pending = self.pending.clone();
        rt.spawn(async move {
            tokio::time::sleep(RELEASE_AFTER).await;
            pending.store(false, Ordering::Release);
            release_free_heap();
        });
    }
}
