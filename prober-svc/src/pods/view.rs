//! The read side of the prober: what it knows of each pod, as the readiness gate
//! ([`View::readiness`], the `podward.io/ready` condition) and the `Status` API
//! ([`View::status`], kubelet's started/ready/live) read it.
//!
//! It only reads: the [`PodTable`] the manager keeps (pods, their annotation, their workers'
//! status), the [`Results`] cache the workers publish into, and the kill path's record. Nothing
//! here starts, stops or tells anything, so a reader of the gate never goes back into the
//! manager.

use std::sync::Arc;

use crate::clock::Clock;
use crate::consequences::kill::Killer;
use crate::pods::pod_table::PodTable;
use crate::probing::results::Results;
use crate::probing::runner::ProbeRunner;

pub mod readiness;
mod status;

/// The read model. Cheap to clone.
#[derive(Clone)]
pub struct View {
    pods: Arc<PodTable>,
    results: Arc<Results>,
    killer: Killer,
    runner: Arc<dyn ProbeRunner>,
    clock: Clock,
}

impl View {
    /// A view of `pods` and `results`, with kills from `killer`, exec runner choices from
    /// `runner`, and `clock`'s start as the prober's start (kubelet's restart rules).
    pub fn new(
        pods: Arc<PodTable>,
        results: Arc<Results>,
        killer: Killer,
        runner: Arc<dyn ProbeRunner>,
        clock: Clock,
    ) -> Self {
        Self {
            pods,
            results,
            killer,
            runner,
            clock,
        }
    }

    /// The pods and workers read.
    pub fn registry(&self) -> &PodTable {
        &self.pods
    }

    /// The results cache read.
    pub fn results(&self) -> &Results {
        &self.results
    }
}
