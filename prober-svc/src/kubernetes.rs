//! The prober and the Kubernetes API, the way kubelet's status manager and event recorder meet
//! it (kube-rs client and runtime; no hand-written HTTP):
//!
//! - [`pods`]: a node-scoped reflector (`fieldSelector=spec.nodeName=<node>`) giving the manager
//!   what CRI lacks ([`crate::model::api_pod::ApiPod`]: restart policy, sidecars, readiness gate,
//!   preStop hooks, deletion, phase, the mutable `podward.io/probes` annotation);
//! - [`gate`]: the `podward.io/ready` readiness-gate condition writer (coalesced, rate-limited,
//!   retried, zero writes when stable, restart-safe);
//! - [`events`]: kubelet's events as client-go's recorder writes them, correlated by
//!   [`correlate`] (series of identical notes, combined similar ones, a per-pod spam filter);
//! - [`client`] and [`limit`]: the clients (`--kubeconfig` or in-cluster) with kubelet's
//!   `--kube-api-qps`/`--kube-api-burst` (status, pods) and `--event-qps`/`--event-burst` token
//!   buckets; [`convert`]: `Pod` → `ApiPod`; [`metrics`];
//! - [`lease`]: the node's prober lease (renewed while the prober is healthy) and the
//!   [`sentinel`], which marks a gone prober's pods not ready; [`admission`]: the webhook that
//!   moves spec probes into the annotation, and [`migrate`], its one-shot counterpart for
//!   manifests;
//! - [`api_side`]: all of the above as the daemon starts it.
//!
//! Everything here is optional and off the probing path: with the API unreachable (or not
//! configured) the prober probes and kills exactly as without it; readiness writes wait.

pub mod admission;
pub mod api_side;
pub mod client;
pub mod convert;
pub mod correlate;
pub mod events;
pub mod gate;
pub mod lease;
pub mod limit;
pub mod metrics;
pub mod migrate;
pub mod names;
pub mod pods;
pub mod sentinel;
pub mod vouch;

pub use self::api_side::{ApiSettings, ApiSide};
pub use self::names::DEFAULT_GATE_CONDITION;
