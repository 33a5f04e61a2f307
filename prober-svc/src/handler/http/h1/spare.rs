//! The exchange's byte buffer (the request, then each read from the socket), reused across the
//! probes of one runtime thread instead of allocated and freed per probe.
//!
//! A probe's buffer is larger than the allocator's per-thread cache takes (glibc's tcache stops at
//! 1 KiB), so a fresh one per probe went through the allocator's bins and their consolidation on
//! every HTTP probe. Each thread keeps up to [`KEPT_PER_THREAD`] spare buffers of at most
//! [`KEPT_CAPACITY`] bytes: bounded, whatever the probes do (a buffer grown larger is freed, not
//! kept), and a buffer given back on another thread than it came from just joins that thread's.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// How much is read from the socket at a time (the head of a probe's answer fits).
pub(crate) const READ_CHUNK: usize = 4096;

/// Spare buffers one thread keeps: about as many as a runtime thread has HTTP probes between two
/// reads at a high probe rate; beyond it a probe allocates its buffer afresh.
pub(crate) const KEPT_PER_THREAD: usize = 64;

/// Largest buffer kept; a larger one (a read grew it) is freed.
pub(crate) const KEPT_CAPACITY: usize = 4 * READ_CHUNK;

thread_local! {
    static SPARES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of at least [`READ_CHUNK`] bytes, empty when taken, kept for the next probe when
/// dropped.
#[derive(Debug)]
pub(crate) struct Spare(Vec<u8>);

impl Spare {
    /// This thread's spare buffer, or a new one.
    pub(crate) fn take() -> Self {
        let mut buf = SPARES
            .try_with(|s| s.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_default();
        buf.clear();
        buf.reserve(READ_CHUNK);
        Self(buf)
    }

    /// Spare buffers this thread keeps now.
    #[cfg(test)]
    pub(crate) fn kept() -> usize {
        SPARES.with(|s| s.borrow().len())
    }
}

impl Deref for Spare {
    type Target = Vec<u8>;

    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl DerefMut for Spare {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        if buf.capacity() < READ_CHUNK || buf.capacity() > KEPT_CAPACITY {
            return;
        }
        // Not during the thread's own teardown (`try_with` fails then): the buffer is freed.
        let _ = SPARES.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < KEPT_PER_THREAD {
                s.push(buf);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_on_a_thread_and_the_spares_stay_bounded() {
        std::thread::spawn(|| {
            let mut a = Spare::take();
            a.extend_from_slice(b"GET / HTTP/1.1\r\n");
            let at = a.as_ptr();
            drop(a);
            assert_eq!(Spare::kept(), 1);
            let b = Spare::take();
            assert_eq!(b.as_ptr(), at, "the same allocation, not a new one");
            assert!(b.is_empty(), "taken empty");
            assert!(b.capacity() >= READ_CHUNK);
            drop(b);
            // Never more than the bound kept, however many were in use at once.
            let many: Vec<Spare> = (0..KEPT_PER_THREAD + 10).map(|_| Spare::take()).collect();
            drop(many);
            assert_eq!(Spare::kept(), KEPT_PER_THREAD);
            // A buffer a read grew past the kept size is freed, not kept.
            let mut big = Spare::take();
            big.reserve(KEPT_CAPACITY * 2);
            let before = Spare::kept();
            drop(big);
            assert_eq!(Spare::kept(), before);
        })
        .join()
        .expect("thread");
    }
}
