//! Names podward writes on pods that more than one of its parts reads: the readiness gate's
//! condition type, the sentinel's reason on that condition, the annotations the webhook reads and
//! writes and the one that records a takeover. The gate, the sentinel, the admission webhook and
//! `migrate` all depend on this file, and it depends on none of them.

/// The readiness-gate condition type the prober owns by default.
pub const DEFAULT_GATE_CONDITION: &str = "podward.io/ready";

/// The gate condition's reason when the sentinel marks a gone prober's pod `False`: the gate
/// writer leaves such a condition alone until its node lease vouches for it again.
pub const SENTINEL_REASON: &str = "ProberNotReporting";

/// The annotation that records what the takeover moved (JSON: `containers`, and the
/// `readinessGate` and `nodeSelector` entry it added), written by the admission webhook, read by
/// the pod reflector and by `migrate --revert`.
pub const MOVED_ANNOTATION: &str = "podward.io/probes-moved";

/// The annotation the prober reads its probes from.
pub const PROBES_ANNOTATION: &str = "podward.io/probes";

/// A pod's own choice: `"true"` opts a pod in outside a takeover namespace (the webhook
/// configuration's match condition), `"false"` opts it out inside one.
pub const OPT_IN_ANNOTATION: &str = "podward.io/probes-takeover";
