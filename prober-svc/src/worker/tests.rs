//! The worker state machine (acceptance list A1–A15 of `reference/kubelet-probes.md`), driven
//! through the real manager with a scripted probe runner and killer, in paused tokio time.

mod harness;
mod lifecycle;
mod state_machine;
