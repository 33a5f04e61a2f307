//! Fault injection for deterministic tests of races that are narrow in real life.
//!
//! Compiled in only with the `fault-injection` cargo feature; without it [`Faults`] is an empty
//! type whose hooks do nothing, so release builds carry no test code on the relay path. There is
//! deliberately no flag or environment variable: faults are set programmatically by a test that
//! runs the shim in-process.

#[cfg(feature = "fault-injection")]
mod hold;

#[cfg(feature = "fault-injection")]
pub use hold::HeldResponse;

/// A response the relay holds back (fault injection; never made without the feature).
#[derive(Debug)]
pub struct Hold {
    #[cfg(feature = "fault-injection")]
    waiting: hold::Waiting,
}

impl Hold {
    /// Whether the response may go on: its handle released it or was dropped.
    #[cfg(not(feature = "fault-injection"))]
    pub fn is_over(&self) -> bool {
        true
    }

    /// Whether the response may go on: its handle released it or was dropped.
    #[cfg(feature = "fault-injection")]
    pub fn is_over(&self) -> bool {
        self.waiting.is_over()
    }
}

/// The set of armed faults, shared with the relay.
#[derive(Clone, Default, Debug)]
pub struct Faults {
    #[cfg(feature = "fault-injection")]
    holds: hold::Holds,
    /// Paths whose next request makes the reader panic (once each).
    #[cfg(feature = "fault-injection")]
    blinds: std::sync::Arc<parking_lot::Mutex<Vec<String>>>,
}

impl Faults {
    /// No faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether any fault is armed (a cheap check before the per-stream one).
    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub fn is_armed(&self) -> bool {
        false
    }

    /// Whether any fault is armed (a cheap check before the per-stream one).
    #[cfg(feature = "fault-injection")]
    pub fn is_armed(&self) -> bool {
        self.holds.is_armed()
    }

    /// Whether the response to `path` is to be held.
    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub fn holds(&self, _path: &str) -> bool {
        false
    }

    /// Whether the response to `path` is to be held.
    #[cfg(feature = "fault-injection")]
    pub fn holds(&self, path: &str) -> bool {
        self.holds.holds(path)
    }

    /// Hook on the relay path, after containerd's response to `path` was read and before it is
    /// handed to the caller: the hold that applies to it, if one is armed (never without the
    /// `fault-injection` feature).
    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub fn hold_response(&self, _path: &str) -> Option<Hold> {
        None
    }

    /// Hook on the relay path: the hold armed for `path`, if any. The connection's
    /// server-to-client bytes wait until [`Hold::is_over`] (the caller's own reset still reaches
    /// containerd meanwhile).
    #[cfg(feature = "fault-injection")]
    pub fn hold_response(&self, path: &str) -> Option<Hold> {
        self.holds.start(path).map(|waiting| Hold { waiting })
    }

    /// Holds back the response of the next call to `path` (e.g.
    /// `/runtime.v1.RuntimeService/RunPodSandbox`) until the returned handle is released or
    /// dropped.
    #[cfg(feature = "fault-injection")]
    pub fn hold_next_response(&self, path: &str) -> HeldResponse {
        self.holds.arm(path)
    }

    /// Whether the reader is to fail on this request to `path` (and the fault is then spent).
    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub fn blinds(&self, _path: &str) -> bool {
        false
    }

    /// Whether the reader is to fail on this request to `path` (and the fault is then spent).
    #[cfg(feature = "fault-injection")]
    pub fn blinds(&self, path: &str) -> bool {
        let mut b = self.blinds.lock();
        match b.iter().position(|p| p == path) {
            Some(i) => {
                b.remove(i);
                true
            }
            None => false,
        }
    }

    /// Makes the side reader panic on the next request to `path`, as a reader bug would: its
    /// connection is relayed on but no longer observed.
    #[cfg(feature = "fault-injection")]
    pub fn blind_on_next_request(&self, path: &str) {
        self.blinds.lock().push(path.to_owned());
    }
}
