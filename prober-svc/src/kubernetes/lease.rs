//! The node lease: a `coordination.k8s.io/v1` Lease per node, in podward's namespace and named
//! after the node, that the prober renews while it can vouch for probing on its node — the
//! statement kubelet's node lease makes for kubelet. The sentinel ([`crate::kubernetes::sentinel`])
//! reads an expired lease as "this node's readiness is not being kept".
//!
//! - Renewed from a loop of its own that waits on nothing but the API: never on the pod watch,
//!   a relist, or one pod's write. What withdraws it is what really stops probing
//!   ([`Health`]: no pod source at all; the node's pods never listed for a lease duration since
//!   start; the process itself, on whose runtime the loop runs; the API unreachable). A resumed
//!   watch or one pod's refused write is counted and written on the lease
//!   ([`PROBLEMS_ANNOTATION`]), never node-wide.
//! - Renewed at once on start (kubelet renews in its first sync), then at kubelet's node-lease
//!   cadence (every 10 s, a 50 s duration: the node lifecycle controller's grace period), by
//!   kubelet's algorithm: the lease is kept from the last answer and updated (`PUT`) with a new
//!   `renewTime`, up to [`MAX_TRIES`] times (`retryUpdateLease`: a `409` reads it again first);
//!   failing that it is read again, or created when missing, with a doubling backoff
//!   (`backoffEnsureLease`).
//! - Owned by its Node (kubelet's `SetNodeOwnerFunc`: `v1`/`Node`, name and uid from a read of
//!   the Node), so the garbage collector deletes it with the Node; it carries the Node's
//!   `topology.kubernetes.io/zone` label, so the sentinel follows zones without watching
//!   Nodes. A Node that cannot be read (no RBAC, not found yet) leaves the lease without an
//!   owner and a zone, and is read again at the next renewal.
//! - Its own client with its own token bucket, as kubelet's heartbeat client: a renewal never
//!   waits behind a queue of condition writes.
//! - Each success is told to the [`Vouch`](crate::kubernetes::vouch::Vouch) the gate writer reads: a prober whose lease is not
//!   current does not overwrite the sentinel's `False`.

pub mod handover;
mod health;
mod labels;
mod metrics;
mod namespace;
pub mod node;
pub mod ready;
mod renewer;
pub mod report;

pub use self::health::{Blind, Health, ProberHealth};
pub use self::labels::{NODE_LEASE_LABEL, PROBLEMS_ANNOTATION, ZONE_LABEL};
pub use self::metrics::LeaseMetrics;
pub use self::namespace::lease_namespace;
pub use self::renewer::{LeaseSettings, MAX_TRIES, RenewError, Renewer, micro_time, spawn};
