//! The probe handlers, one module per kind, as kubelet's `pkg/probe/{exec,http,tcp,grpc}`: each
//! makes one attempt against a [`attempt::ProbeTarget`] and answers with an [`attempt::Answer`]
//! (Success, Warning or Failure with its output) or its own typed error. Retries, and the
//! outcome they make of answers and errors, are one floor up, in `crate::probing::probe`;
//! nothing here knows about workers, and nothing here is shared with the layers above: what a
//! probe came to, its output limit and a container's ports are the model's
//! (`crate::model::{outcome, container_port}`).
//!
//! What the handlers share sits in leaf modules they all import and that import none of them:
//! [`attempt`] (target and answer) and [`go_text`] (Go's wording of durations, gRPC statuses
//! and OS errors, so messages read as kubelet's).
//! Network handlers dial through [`dialer`] (which checks every address against the
//! [`host_policy`] guard of a probe that names a host, and resolves names through [`resolve`],
//! the probes' own bounded lookup pool); named ports resolve through [`port`]; exec commands
//! are `$(VAR)`-expanded by [`expand`]. hyper's HTTP/2 tasks run in the probe's own future
//! (`scoped`), so nothing a probe opened outlives it; [`pod_sockets`] bounds how many network
//! probes (hence sockets) one pod has in flight.

pub mod attempt;
pub mod dial_error;
pub mod dialer;
pub mod exec;
pub mod expand;
pub mod go_text;
pub mod grpc;
pub mod host_policy;
pub mod http;
pub mod pod_sockets;
pub mod port;
pub mod resolve;
mod scoped;
pub mod target_budget;
pub mod tcp;
mod write_through;
