//! A worker's tick, before any probe: which instance of the container it follows, and whether
//! that instance is probed now, waited for, or never again (kubelet's `doProbe` up to the probe).

use super::handle::WorkerStatus;
use super::state::{Worker, initial_value};
use crate::model::outcome::ProbeResult;
use crate::model::{ContainerInfo, PodInfo, RunState};
use crate::spec::ProbeType;

/// What a worker does at its tick.
pub(super) enum Due {
    /// Probe, at this address.
    Probe(std::net::IpAddr),
    /// Nothing this time.
    Wait,
    /// End: the container will not run again.
    Exit,
}

impl Worker {
    /// A new instance of the container (or the first): the counters and the hold start again
    /// for it, and its initial value is published.
    pub(super) fn follow_instance(&mut self, pod: &PodInfo, c: &ContainerInfo) {
        if self.container_id.as_deref() == Some(&*c.id) {
            return;
        }
        if let Some(old) = self.container_id.take() {
            self.ctx.results.remove(&old, self.key.ty);
        }
        self.container_id = Some(c.id.clone());
        self.published = None;
        self.status.update(|st| {
            *st = WorkerStatus {
                container_id: c.id.to_string(),
                probes_run: st.probes_run,
                probes_errored: st.probes_errored,
                ..WorkerStatus::default()
            };
        });
        // After a prober restart, leave containers that ran before it without a result, so
        // they keep their readiness until a real verdict (kubelet's restart grace rule).
        if !self.started_before_restart(c) {
            self.set(pod, c, initial_value(self.key.ty), "");
        }
        self.on_hold = false;
        self.last_result = None;
        self.result_run = 0;
    }

    /// Whether container `c` is probed now (at the pod's IP), waited for, or never again.
    pub(super) fn due(&mut self, pod: &PodInfo, c: &ContainerInfo) -> Due {
        if self.on_hold {
            return Due::Wait;
        }
        if c.state != RunState::Running {
            self.set(pod, c, ProbeResult::Failure, "");
            // kubelet stops only when the container exited for good (restartPolicy Never, not
            // a sidecar). Without the API's view the policy is unknown: keep waiting for a new
            // instance until the pod goes.
            let done = c.state == RunState::Exited
                && pod
                    .api
                    .as_ref()
                    .is_some_and(|a| !a.restarts(&self.key.container));
            return if done { Due::Exit } else { Due::Wait };
        }
        if self.hold_for_termination(pod, c) {
            return Due::Wait;
        }
        let since_start_s = (self.ctx.clock.now_ns() - c.started_at_ns) / 1_000_000_000;
        if since_start_s < i64::from(self.spec.initial_delay_seconds) {
            return Due::Wait;
        }
        // Startup probes run until the container started, the others only after.
        if self.is_started(c) != (self.key.ty != ProbeType::Startup) {
            return Due::Wait;
        }
        match pod.ip {
            Some(ip) => Due::Probe(ip),
            // No address yet (pod network not set up): like a kubelet probe error, discarded.
            None => Due::Wait,
        }
    }

    /// Liveness and startup stop when the pod or the container is terminating (kubelet's
    /// `StopLivenessAndStartup`): the result is Success and the worker holds. `true` when held.
    pub(super) fn hold_for_termination(&mut self, pod: &PodInfo, c: &ContainerInfo) -> bool {
        let terminating = pod.terminating() || c.stop_requested_at_ns != 0;
        if !terminating || !matches!(self.key.ty, ProbeType::Liveness | ProbeType::Startup) {
            return false;
        }
        self.set(pod, c, ProbeResult::Success, "");
        self.on_hold = true;
        self.status.update(|st| st.on_hold = true);
        true
    }
}
