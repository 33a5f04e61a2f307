//! The worker state machine (items A1–A15 of the test IDs in `docs/prober.md`, after kubelet's
//! `pkg/kubelet/prober/worker_test.go`), driven through the real manager and kill path with a
//! scripted probe runner and stopper, in paused tokio time.

mod api;
mod errored;
mod harness;
mod host_policy;
mod kill_series;
mod lifecycle;
mod spec_names;
mod starved;
mod state_machine;
