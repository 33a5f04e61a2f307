//! podward-prober: liveness, readiness and startup probes with kubelet-exact semantics, outside
//! the kubelet. From the `podward.io/probes` annotation to a `StopContainer` call, in four layers
//! (the two in the middle are folders of their own):
//!
//! - **sources**: [`source`] follows the shim's Lifecycle stream (or polls containerd's CRI when
//!   the shim is down) and tells the [`manager`] which pods ([`model`]) exist; the [`manager`]
//!   parses each new pod's annotation ([`spec`]) and runs one worker per (pod, container, probe
//!   type), as kubelet does, keeping pods and workers in the [`pod_table`];
//! - **[`probing`]**: a [`probing::worker`] probes through the [`probing::runner`] seam, whose real
//!   side is [`probing::probe`] (retries and mapping) over the [`handler`]s (exec, HTTP, TCP,
//!   gRPC; an exec probe runs through CRI `ExecSync` or [`direct_exec`], the runner that starts
//!   the command in the container itself and builds on the exec handler's runner seam), counts
//!   the verdicts, publishes results into the [`probing::results`] cache and its own [`event`]s
//!   (result changes, what kubelet records), delivered to every sink: the [`hub`] behind
//!   [`service`]'s `Watch`, the readiness gate; the [`view`] reads the pod table and the results: a
//!   pod's readiness for the gate, `Status` for [`service`] (through [`wire`]);
//! - **[`consequences`]**: a liveness or startup failure at threshold goes (through the manager,
//!   which checks the pod is still followed) to [`consequences::kill`], which runs the container's
//!   [`consequences::prestop`] hook, stops the container through the [`stopper`] seam
//!   (CRI `StopContainer`), records it and publishes its event;
//! - **[`kubernetes`]**: what CRI lacks from the Kubernetes API (pod reflector), the
//!   `podward.io/ready` readiness-gate condition (from the [`view`]) and kubelet's events; the node
//!   [`lease`] and the [`sentinel`] that marks a gone prober's pods.
//!
//! [`metrics`] keeps kubelet's metric names (also on kubelet's `/metrics/probes`); [`config`],
//! [`clock`] and [`run`] are the daemon, [`cli`] its command line and the one-shot `status`.

pub mod admission;
pub mod allocator;
pub mod cli;
pub mod clock;
pub mod config;
pub mod consequences;
pub mod direct_exec;
pub mod event;
pub mod handler;
pub mod hub;
pub mod kubernetes;
pub mod lease;
pub mod manager;
pub mod metrics;
pub mod migrate;
pub mod model;
pub mod pod_table;
pub mod probing;
pub mod run;
pub mod sentinel;
pub mod service;
pub mod source;
pub mod spec;
pub mod stopper;
pub mod view;
pub mod wire;

#[cfg(test)]
mod test_fakes;

pub use config::{Args, Config};
pub use run::{Options, Parts, RunError, run, run_with};
