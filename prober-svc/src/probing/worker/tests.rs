//! The worker state machine (items A1–A15 of the test IDs in `docs/prober.md`, after kubelet's
//! `pkg/kubelet/prober/worker_test.go`), driven through the real manager and kill path with a
//! scripted probe runner and stopper, in paused tokio time.

mod annotation_conflicts;
mod api_pod;
mod errored;
mod fail_closed;
mod gate_rules;
mod harness;
mod host_policy;
mod init_containers;
mod kill_series;
mod kill_texts;
mod lifecycle;
mod spec_names;
mod starved;
mod state_machine;
