//! podward-housekeeper: does out of process what kubelet's `HandlePodCleanups` and container GC
//! do, with the safety rules kubelet learned the hard way (`docs/housekeeper.md`).
//!
//! The crate is four layers, each importing only the ones below it:
//!
//! - [`node`]: the node's filesystem (pod cgroups, pod and log directories, the mount table,
//!   process states) found and removed by root path, and [`node::kubelet_names`], the one place
//!   that says which outside names are kubelet's: nothing else is ever acted on.
//! - [`sources`]: what one pass reads, in kubelet's order (pod cgroups, the runtime, the shim's
//!   index, pod and log directories, mounts), behind the `Sources` trait.
//! - [`decision`]: the orphan rule over the per-UID absence history, the assessment of orphans'
//!   pod dirs, the sorted plan with reasons and evidence, and the UID gate (one action per UID at
//!   a time, per-UID backoff). It changes nothing.
//! - [`act`]: executes a plan unless dry-run, re-reading the decisive facts before each
//!   destructive step, and tells the prober which pods are gone.
//!
//! Above them, the daemon: [`reconcile`] runs one pass through the four; [`service`] serves
//! Plan/Reconcile/Status; [`run`](mod@run) is the daemon; [`report`] prints a plan for `plan`;
//! [`cli`], [`config`], [`metrics`] and [`clock`] are its edge.

pub mod act;
pub mod cli;
pub mod clock;
pub mod config;
pub mod decision;
pub mod metrics;
pub mod node;
pub mod reconcile;
pub mod report;
pub mod run;
pub mod service;
pub mod sources;

pub use self::config::Config;
pub use self::run::{RunError, run};
