//! Probing: from a pod's probe specs to results. One [`worker`] per (pod, container, probe
//! type) ticks, reads its pod's [`pod_view`], decides whether a probe is due, probes through the
//! [`runner`] seam (whose real side is [`probe`], over the handlers), counts the verdicts against
//! the thresholds and keeps them in the [`results`] cache; [`starvation`] tells a late probe caused
//! by the prober's own starved runtime from a slow target.

pub mod pod_view;
pub mod probe;
pub mod results;
pub mod runner;
pub mod starvation;
pub mod worker;
