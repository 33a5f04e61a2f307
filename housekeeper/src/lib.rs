//! podward-housekeeper: does out of process what kubelet's `HandlePodCleanups` and container GC
//! do, with the safety rules kubelet learned the hard way (`docs/housekeeper.md`).
//!
//! A pass reads its sources in kubelet's order ([`sources`]), folds the runtime's answer into the
//! per-UID absence history ([`orphan`]), has the orphans' pod dirs assessed off the async
//! runtime ([`assess`]), builds a sorted plan with reasons and evidence
//! ([`plan`]) and executes it unless dry-run ([`act`]), one action per UID at a time with
//! per-UID backoff ([`gate`]). [`api`] serves Plan/Reconcile/Status; [`run`] is the daemon.
//!
//! The node-side modules ([`cgroup`], [`mounts`], [`pod_dir`], [`log_dir`], [`procs`]) find and
//! remove things on the filesystem; everything above them only decides. [`kubelet_names`] is the
//! one place that says which outside names are kubelet's: nothing else is ever acted on.

pub mod act;
pub mod api;
pub mod assess;
pub mod cgroup;
pub mod cli;
pub mod clock;
pub mod config;
pub mod container_gc;
pub mod fs_error;
pub mod gate;
pub mod kubelet_names;
pub mod log_dir;
pub mod metrics;
pub mod mounts;
pub mod orphan;
pub mod plan;
pub mod pod_dir;
pub mod prober_link;
pub mod procs;
pub mod reconcile;
pub mod report;
pub mod run;
pub mod runtime;
pub mod sandbox;
pub mod shim_source;
pub mod sources;

pub use self::config::Config;
pub use self::run::{RunError, run};
