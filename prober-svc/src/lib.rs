//! podward-prober: liveness, readiness and startup probes with kubelet-exact semantics, outside
//! the kubelet.
//!
//! - [`source`] follows the shim's Lifecycle stream (or polls containerd's CRI when the shim is
//!   down) and keeps the [`manager`] told which pods and containers exist;
//! - [`manager`] runs one [`worker`] per (pod, container, probe type), as kubelet does;
//! - workers call the probe handlers ([`probe`], via the [`runner`] seam) and publish into the
//!   [`results`] cache; the manager fans changes out to [`api`] (Status/Watch) and [`kill`]
//!   (CRI StopContainer on liveness/startup failure);
//! - [`metrics`] keeps kubelet's metric names; [`config`] is the daemon's typed configuration.

pub mod api;
pub mod clock;
pub mod config;
pub mod event;
pub mod hub;
pub mod kill;
pub mod manager;
pub mod metrics;
pub mod model;
pub mod results;
pub mod run;
pub mod runner;
pub mod source;
pub mod wire;
pub mod worker;

#[cfg(test)]
mod test_fakes;

pub mod handler;
pub mod probe;
pub mod spec;

pub use config::{Args, Config};
pub use run::{Options, Parts, RunError, run, run_with};
