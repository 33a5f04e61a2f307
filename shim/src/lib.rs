//! podward-shim: a transparent CRI relay between kubelet and containerd that keeps an index of
//! the container lifecycle and publishes it on the `podward.shim.v1.Lifecycle` API.
//!
//! - [`relay`]: every client connection gets its own connection to containerd; bytes are copied
//!   both ways unchanged;
//! - [`h2read`]: a passive HTTP/2 reader (frames, HPACK), reporting streams in HTTP/2 terms;
//! - [`observe`]: the CRI calls read from those streams, which are watched, and how their
//!   bytes become [`index::Observation`]s;
//! - [`index`]: the sandboxes and containers, and the ordered changes to them;
//! - [`keep`]: what the index keeps of a CRI object, and the bound on each field;
//! - [`publish`]: per-subscriber bounded queues with resync snapshots;
//! - [`runtime`]: what the shim learns from containerd directly: whether it is up, its task
//!   exit / OOM / delete events, the index rebuilt from it at start and after a reconnect, and
//!   relists while observation is lost;
//! - [`carry`]: undelivered results carried from one shim process to the next;
//! - [`lifecycle_api`]: the control socket's gRPC service;
//! - [`fault`]: test-only fault injection (cargo feature `fault-injection`).
// Denied, not forbidden: `memory` alone allows it, for one call into the C allocator.
#![deny(unsafe_code)]

pub mod carry;
pub mod config;
pub mod fault;
pub mod h2read;
pub mod index;
pub mod keep;
pub mod lifecycle_api;
mod memory;
pub mod metrics;
pub mod observe;
pub mod publish;
pub mod relay;
mod run;
pub mod runtime;

pub use run::{Options, RunError, StartError, run, run_with};
