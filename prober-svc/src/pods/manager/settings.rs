//! What the manager is built with besides its parts: this node's settings for probing, set once
//! at construction and passed down to what needs them.

use std::sync::Arc;

use crate::handler::host_policy::NodePolicy;
use crate::probing::starvation::StarvationMeter;

/// This node's settings for probing.
#[derive(Clone, Default)]
pub struct Settings {
    /// `--probe-host-policy` and the node IP (a pod probed there is hostNetwork): a probe it
    /// refuses on its spec alone is a spec error with no worker. `None`: every host is allowed.
    pub host_policy: Option<NodePolicy>,
    /// Measures the prober's own starvation: a probe that timed out while the prober was
    /// starved is then retried rather than failed (`docs/prober.md`, "Starvation"). `None`:
    /// every timeout counts (kubelet's behaviour).
    pub starvation: Option<Arc<dyn StarvationMeter>>,
}
