//! The gate's readiness source, scripted: each pod's readiness is what the test puts in the map.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::HashMap;

use parking_lot::Mutex;
use podward_prober::kubernetes::gate::ReadinessSource;
use podward_prober::pods::view::readiness::PodReadiness;

/// Readiness per pod, as the test says; a pod not in the map was not probed.
#[derive(Default)]
pub struct Scripted(pub Mutex<HashMap<String, PodReadiness>>);

impl ReadinessSource for Scripted {
    fn readiness(&self, uid: &str) -> PodReadiness {
        self.0
            .lock()
            .get(uid)
            .cloned()
            .unwrap_or(PodReadiness::NotProbed)
    }
}
