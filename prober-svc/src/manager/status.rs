//! `Status`: per pod and container, started/ready/live as kubelet's `UpdatePodStatus` computes
//! them, with each probe's counters.

use std::collections::BTreeSet;

use podward_api::prober::v1 as api;

use super::Manager;
use crate::model::{ContainerInfo, RunState};
use crate::results::ProbeResult;
use crate::spec::ProbeType;
use crate::wire;
use crate::worker::handle::WorkerKey;
use crate::worker::started_before_restart;

impl Manager {
    /// Status of every probed pod, or of `uid` only.
    pub fn status(&self, uid: Option<&str>) -> api::StatusResponse {
        let entries: Vec<_> = {
            let pods = self.state.pods.lock();
            pods.iter()
                .filter(|(u, _)| uid.is_none_or(|w| w == u.as_str()))
                .map(|(_, e)| {
                    (
                        e.shared.clone(),
                        e.spec_errors
                            .iter()
                            .cloned()
                            .chain(e.unknown.errors())
                            .collect::<Vec<_>>(),
                        e.has_startup.clone(),
                    )
                })
                .collect()
        };
        let mut out = api::StatusResponse::default();
        for (shared, errors, has_startup) in entries {
            let pod = shared.read().clone();
            let mut containers = Vec::new();
            let workers = self.state.workers.lock();
            let first = WorkerKey {
                pod_uid: pod.uid.clone(),
                container: String::new(),
                ty: ProbeType::Liveness,
            };
            let names: BTreeSet<String> = workers
                .range(first..)
                .take_while(|(k, _)| k.pod_uid == pod.uid)
                .map(|(k, _)| k.container.clone())
                .collect();
            for name in names {
                let c = pod.current(&name);
                let mut probes = Vec::new();
                let mut has_readiness = false;
                for ty in ProbeType::ALL {
                    let key = WorkerKey {
                        pod_uid: pod.uid.clone(),
                        container: name.clone(),
                        ty,
                    };
                    let Some(w) = workers.get(&key) else { continue };
                    has_readiness |= ty == ProbeType::Readiness;
                    let st = w.status.lock().clone();
                    probes.push(api::ProbeStatus {
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
                    });
                }
                let (started, ready, live) = match c {
                    Some(c) => self.flags(c, has_startup.contains(&name), has_readiness),
                    None => (false, false, true),
                };
                let kills = self.state.killer.log(&pod.uid, &name);
                let exec = c.and_then(|c| self.ctx.runner.exec_choice(&c.id));
                containers.push(api::ContainerStatus {
                    name,
                    container_id: c.map(|c| c.id.to_string()).unwrap_or_default(),
                    started,
                    ready,
                    live,
                    probes,
                    kills: kills.count,
                    last_kill: kills.last.as_ref().map(wire::kill),
                    exec_runner: exec
                        .as_ref()
                        .map(|e| e.runner.to_owned())
                        .unwrap_or_default(),
                    exec_runner_reason: exec.map(|e| e.reason).unwrap_or_default(),
                });
            }
            drop(workers);
            out.pods.push(api::PodStatus {
                pod_uid: pod.uid.clone(),
                pod_name: pod.name.clone(),
                pod_namespace: pod.namespace.clone(),
                containers,
                spec_errors: errors
                    .into_iter()
                    .map(|e| api::SpecError {
                        container: e.container,
                        field: e.field,
                        message: e.message,
                    })
                    .collect(),
            });
        }
        out
    }

    /// (started, ready, live) of one container instance, as kubelet's `UpdatePodStatus`.
    fn flags(
        &self,
        c: &ContainerInfo,
        has_startup: bool,
        has_readiness: bool,
    ) -> (bool, bool, bool) {
        let results = &self.ctx.results;
        let running = c.state == RunState::Running;
        let before_restart = started_before_restart(c, &self.state.clock);
        let started = running
            && (!has_startup
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
