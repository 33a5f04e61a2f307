//! The allocator's settings for the prober. Buffers of [`MMAP_THRESHOLD`] or more (a long
//! response head, an HTTP/2 header block) are mapped on their own, so their memory goes back to
//! the system as soon as the probe that read them ends. glibc's default threshold rises each time
//! such a buffer is freed (up to 32 MiB), after which buffers of that size come from the heap and
//! the process keeps their memory once a hostile target's probes are gone.
#![allow(unsafe_code)]

/// Allocations of this size or more are mapped on their own.
pub const MMAP_THRESHOLD: i32 = 1 << 20;

/// Applies the settings; call once at start, before the probes run.
pub fn return_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets one of glibc's malloc tunables; it takes no pointers.
    let done = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) } == 1;
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let done = false;
    if !done {
        tracing::debug!("the allocator's mapping threshold is left as it is");
    }
}
