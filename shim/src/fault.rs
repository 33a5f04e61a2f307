//! Fault injection for deterministic tests of races that are narrow in real life.
//!
//! Compiled in only with the `fault-injection` cargo feature; without it [`Faults`] is an empty
//! type whose hook does nothing, so release builds carry no test code on the forwarding path.
//! There is deliberately no flag or environment variable: faults are set programmatically by a
//! test that runs the shim in-process.

#[cfg(feature = "fault-injection")]
mod hold;

#[cfg(feature = "fault-injection")]
pub use hold::HeldResponse;

/// The set of armed faults, shared with the forwarder.
#[derive(Clone, Default, Debug)]
pub struct Faults {
    #[cfg(feature = "fault-injection")]
    holds: hold::Holds,
}

impl Faults {
    /// No faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hook on the forwarding path, after containerd's response headers arrived and before the
    /// response is returned to the caller.
    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub async fn before_response(&self, _path: &str) {}

    /// Hook on the forwarding path: waits while an armed hold for `path` applies.
    #[cfg(feature = "fault-injection")]
    pub async fn before_response(&self, path: &str) {
        self.holds.before_response(path).await;
    }

    /// Holds back the response of the next call to `path` (e.g.
    /// `/runtime.v1.RuntimeService/RunPodSandbox`) until the returned handle is released or
    /// dropped.
    #[cfg(feature = "fault-injection")]
    pub fn hold_next_response(&self, path: &str) -> HeldResponse {
        self.holds.arm(path)
    }
}
