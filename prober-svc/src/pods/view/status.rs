//! `Status`: per pod and container, started/ready/live as kubelet's `UpdatePodStatus` computes
//! them, with each probe's counters.

use std::collections::{BTreeMap, BTreeSet};

use podward_api::prober::v1 as api;

use super::View;
use crate::model::outcome::ProbeResult;
use crate::model::{ContainerInfo, PodInfo, RunState};
use crate::probing::worker::handle::WorkerStatus;
use crate::probing::worker::started_before_restart;
use crate::publish::wire;
use crate::spec::{ProbeType, StartupGating};

impl View {
    /// Status of every probed pod, or of `uid` only.
    pub fn status(&self, uid: Option<&str>) -> api::StatusResponse {
        let entries = self.pods.entries(uid, |e| {
            (e.shared.clone(), e.all_errors(), e.startup.clone())
        });
        let pods = entries
            .into_iter()
            .map(|(shared, errors, startup)| {
                let pod = shared.read().clone();
                api::PodStatus {
                    pod_uid: pod.uid.clone(),
                    pod_name: pod.name.clone(),
                    pod_namespace: pod.namespace.clone(),
                    containers: self.containers(&pod, &startup),
                    spec_errors: errors
                        .into_iter()
                        .map(|e| api::SpecError {
                            container: e.container,
                            field: e.field,
                            message: e.message,
                        })
                        .collect(),
                }
            })
            .collect();
        api::StatusResponse { pods }
    }

    /// The status of every container of `pod` that has a worker.
    fn containers(
        &self,
        pod: &PodInfo,
        startup: &BTreeMap<String, StartupGating>,
    ) -> Vec<api::ContainerStatus> {
        let workers = self.pods.workers_of(&pod.uid);
        let names: BTreeSet<&str> = workers.iter().map(|(c, ..)| c).collect();
        names
            .into_iter()
            .map(|name| {
                let probes: Vec<(ProbeType, WorkerStatus, String)> = ProbeType::ALL
                    .into_iter()
                    .filter_map(|ty| {
                        workers
                            .get(name, ty)
                            .map(|w| (ty, w.status.get(), w.spec.describe()))
                    })
                    .collect();
                let gating = startup.get(name).copied().unwrap_or_default();
                self.container(pod, name, gating, probes)
            })
            .collect()
    }

    /// The status of container `name` of `pod`, whose workers' statuses are `probes`.
    fn container(
        &self,
        pod: &PodInfo,
        name: &str,
        startup: StartupGating,
        probes: Vec<(ProbeType, WorkerStatus, String)>,
    ) -> api::ContainerStatus {
        let c = pod.current(name);
        let has_readiness = probes.iter().any(|(ty, ..)| *ty == ProbeType::Readiness);
        let (started, ready, live) = match c {
            Some(c) => self.flags(c, startup, has_readiness),
            None => (false, false, true),
        };
        let kills = self.killer.log(&pod.uid, name);
        let exec = c.and_then(|c| self.runner.exec_choice(&c.id));
        api::ContainerStatus {
            name: name.to_owned(),
            container_id: c.map(|c| c.id.to_string()).unwrap_or_default(),
            started,
            ready,
            live,
            probes: probes
                .into_iter()
                .map(|(ty, st, describe)| probe_status(ty, st, describe))
                .collect(),
            kills: kills.count,
            last_kill: kills.last.as_ref().map(wire::kill),
            exec_runner: exec
                .as_ref()
                .map(|e| e.runner.as_str().to_owned())
                .unwrap_or_default(),
            exec_runner_reason: exec.map(|e| e.reason).unwrap_or_default(),
        }
    }

    /// (started, ready, live) of one container instance, as kubelet's `UpdatePodStatus`.
    fn flags(
        &self,
        c: &ContainerInfo,
        startup: StartupGating,
        has_readiness: bool,
    ) -> (bool, bool, bool) {
        let results = &self.results;
        let running = c.state == RunState::Running;
        let before_restart = started_before_restart(c, &self.clock);
        let started = running
            && (startup == StartupGating::Ungated
                || match results.get(&c.id, ProbeType::Startup) {
                    Some(r) => r == ProbeResult::Success,
                    None => before_restart,
                });
        let ready = started
            && match results.get(&c.id, ProbeType::Readiness) {
                Some(r) => r == ProbeResult::Success,
                // No result: ready only without a readiness worker, or (kubelet's restart rule)
                // for a container that ran before this prober started.
                None => !has_readiness || before_restart,
            };
        let live = results.get(&c.id, ProbeType::Liveness) != Some(ProbeResult::Failure);
        (started, ready, live)
    }
}

/// One worker's status on the wire.
fn probe_status(ty: ProbeType, st: WorkerStatus, describe: String) -> api::ProbeStatus {
    api::ProbeStatus {
        r#type: wire::probe_type(ty) as i32,
        result: wire::probe_result(st.result) as i32,
        last_output: st.last_output,
        last_probe_result: wire::probe_result(st.last_probe_result) as i32,
        consecutive_successes: st.consecutive_successes,
        consecutive_failures: st.consecutive_failures,
        last_probe_at_ns: st.last_probe_at_ns,
        last_transition_at_ns: st.last_transition_at_ns,
        on_hold: st.on_hold,
        probes_run: st.probes_run,
        last_error: st.last_error,
        last_error_at_ns: st.last_error_at_ns,
        probes_errored: st.probes_errored,
        describe,
    }
}
