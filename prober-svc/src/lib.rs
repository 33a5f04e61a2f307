//! podward-prober: liveness, readiness and startup probes with kubelet-exact semantics, outside
//! the kubelet. From the `podward.io/probes` annotation to a `StopContainer` call:
//!
//! - [`source`] follows the shim's Lifecycle stream (or polls containerd's CRI when the shim is
//!   down) and tells the [`manager`] which pods ([`model`]) exist;
//! - [`manager`] parses each new pod's annotation ([`spec`]) and runs one [`worker`] per (pod,
//!   container, probe type), as kubelet does, keeping pods and workers in the [`registry`];
//! - a worker probes through the [`runner`] seam, whose real side is [`probe`] (retries and
//!   mapping) over the [`handler`]s (exec, HTTP, TCP, gRPC), counts the verdicts, publishes
//!   results into the [`results`] cache and its own [`event`]s (result changes, what kubelet
//!   records), delivered to every sink: the [`hub`] behind [`service`]'s `Watch`, the readiness gate;
//! - the [`view`] reads the registry and the results: a pod's readiness for the gate, `Status`
//!   for [`service`] (through [`wire`]);
//! - a liveness or startup failure at threshold goes (through the manager, which checks the pod
//!   is still followed) to [`kill`], which stops the container through the [`stopper`] seam
//!   (CRI `StopContainer`), records it and publishes its event;
//! - [`kubernetes`] adds what CRI lacks from the Kubernetes API (pod reflector), owns the
//!   `podward.io/ready` readiness-gate condition (from the [`view`]) and records kubelet's events; [`prestop`] runs a
//!   container's preStop hook before a kill;
//! - [`metrics`] keeps kubelet's metric names (also on kubelet's `/metrics/probes`); [`config`],
//!   [`clock`] and [`run`] are the daemon, [`cli`] its command line and the one-shot `status`.

pub mod cli;
pub mod clock;
pub mod config;
pub mod event;
pub mod handler;
pub mod hub;
pub mod kill;
pub mod kubernetes;
pub mod lease;
pub mod manager;
pub mod metrics;
pub mod model;
pub mod prestop;
pub mod probe;
pub mod registry;
pub mod results;
pub mod run;
pub mod runner;
pub mod sentinel;
pub mod service;
pub mod source;
pub mod spec;
pub mod starvation;
pub mod stopper;
pub mod view;
pub mod wire;
pub mod worker;

#[cfg(test)]
mod test_fakes;

pub use config::{Args, Config};
pub use run::{Options, Parts, RunError, run, run_with};
