//! What a node lease carries besides its spec: the labels the sentinel selects and groups by,
//! and the annotation that reports what the prober counted without withdrawing its lease.

/// Label on every node lease (the sentinel watches leases with it, and nothing else).
pub const NODE_LEASE_LABEL: &str = "podward.io/node-lease";

/// The zone label: the Node's, copied onto its lease; the sentinel groups the leases by it, as
/// the node lifecycle controller groups nodes.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The annotation on the node lease listing the prober's per-pod or transient problems (one
/// line each; absent when there are none): what `podward-prober status` shows beside the lease.
pub const PROBLEMS_ANNOTATION: &str = "podward.io/prober-problems";
