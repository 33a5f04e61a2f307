//! podward-prober: liveness, readiness and startup probes with kubelet-exact semantics, outside
//! the kubelet. From the `podward.io/probes` annotation to a `StopContainer` call; each folder is
//! one layer and imports only the layers below it:
//!
//! - **[`daemon`]**, the edge: config, command line, the gRPC service, and `run`, which starts
//!   every part below;
//! - **[`kubernetes`]**: what CRI lacks from the Kubernetes API (pod reflector), the
//!   `podward.io/ready` readiness-gate condition and kubelet's events; the node lease and the
//!   sentinel that marks a gone prober's pods; the admission webhook;
//! - **[`source`]** follows the shim's Lifecycle stream (or polls containerd's CRI when the shim
//!   is down) and tells the manager which pods exist;
//! - **[`pods`]**: the pod table, the manager that runs one worker per (pod, container, probe
//!   type) as kubelet does, and the view that reads both for the gate and `Status`;
//! - **[`probing`]**: a worker probes through the runner seam (whose real side retries over the
//!   [`handler`]s; an exec probe runs through CRI `ExecSync` or [`direct_exec`]), counts the
//!   verdicts and keeps them in the results cache;
//! - **[`consequences`]**: a liveness or startup failure at threshold runs the container's
//!   preStop hook and stops it through the [`stopper`] seam (CRI `StopContainer`);
//! - **[`publish`]**: the prober's events, their `Watch` hub and wire conversions; beside it
//!   [`handler`] (one attempt of each probe kind, as kubelet's `pkg/probe`, answering
//!   `Result<Answer, E>`), which owns nothing the layers above share;
//! - **[`model`]**: what the prober knows of a pod (its containers and their ports) and what
//!   its probes came to (`Outcome`, `ProbeResult`), the vocabulary every layer above shares;
//!   and at the ground [`spec`] (the annotation's language), [`metrics`] (kubelet's metric
//!   names), [`clock`] and [`stopper`].

pub mod clock;
pub mod consequences;
pub mod daemon;
pub mod direct_exec;
pub mod handler;
pub mod kubernetes;
pub mod metrics;
pub mod model;
pub mod pods;
pub mod probing;
pub mod publish;
pub mod source;
pub mod spec;
pub mod stopper;

#[cfg(test)]
mod test_fakes;
