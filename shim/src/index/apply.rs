//! [`Index::apply`]: each kind of observation handed to the part of the index that folds it in
//! (`cri_calls.rs`, `lists.rs`, `runtime_events.rs`).

use super::entries::{Abandoned, Index};
use super::lists::Listed;
use super::observation::{Change, Observation};

impl Index {
    /// Folds `obs` into the index and returns the changes it made, in order.
    // Long, but flat: one arm per kind of observation, side by side every way the index changes.
    pub fn apply(&mut self, obs: Observation) -> Vec<Change> {
        let mut out = Vec::new();
        match obs {
            Observation::SandboxRun {
                config,
                runtime_handler,
                sandbox_id,
                delivery,
                at_ns,
            } => self.sandbox_run(
                config,
                runtime_handler,
                sandbox_id,
                delivery,
                at_ns,
                &mut out,
            ),
            Observation::SandboxRunAbandoned { metadata } => self.remember(Abandoned::Sandbox {
                name: metadata.name,
                namespace: metadata.namespace,
                uid: metadata.uid,
                attempt: metadata.attempt,
            }),
            Observation::SandboxStop {
                id,
                requested_at_ns,
                completed,
            } => self.sandbox_stop(&id, requested_at_ns, completed, &mut out),
            Observation::SandboxRemove { id } => self.sandbox_remove(&id, &mut out),
            Observation::ContainerCreate {
                sandbox_id,
                config,
                container_id,
                delivery,
                at_ns,
            } => self.container_create(sandbox_id, config, container_id, delivery, at_ns, &mut out),
            Observation::ContainerCreateAbandoned {
                sandbox_id,
                metadata,
            } => self.remember(Abandoned::Container {
                sandbox_id,
                name: metadata.name,
                attempt: metadata.attempt,
            }),
            Observation::ContainerStart { id, at_ns } => self.container_start(&id, at_ns, &mut out),
            Observation::ContainerStop {
                id,
                timeout_seconds,
                requested_at_ns,
                completed,
            } => self.container_stop(&id, timeout_seconds, requested_at_ns, completed, &mut out),
            Observation::ContainerRemove { id } => self.container_remove(&id, &mut out),
            Observation::SandboxList {
                items,
                complete,
                listed_at_ns,
            } => self.sandbox_list(items, complete, listed_at_ns, &mut out),
            Observation::ContainerList {
                items,
                complete,
                listed_at_ns,
            } => self.container_list(items, complete, listed_at_ns, &mut out),
            Observation::SandboxStatus {
                status,
                host_network,
            } => self.sandbox_status(status, host_network, &mut out),
            Observation::ContainerStatus {
                status,
                sandbox_id,
                envs,
            } => self.container_status(status, sandbox_id, envs, &mut out),
            Observation::TaskExit {
                container_id,
                exit_code,
                exited_at_ns,
            } => self.task_exit(&container_id, exit_code, exited_at_ns, &mut out),
            Observation::Truncated {
                sandbox_ids,
                container_ids,
            } => self.truncated(&sandbox_ids, &container_ids, &mut out),
            Observation::TaskOom { container_id } => self.task_oom(&container_id, &mut out),
            Observation::ContainerDeleted { id } => self.deleted(&id, &mut out),
            Observation::Rebuilt {
                sandboxes,
                containers,
            } => {
                let sandbox_ids = sandboxes.iter().map(|s| s.id.clone()).collect();
                let container_ids = containers.iter().map(|c| c.id.clone()).collect();
                let listed = Listed {
                    sandbox_ids,
                    container_ids,
                    at_ns: None,
                };
                self.rebuilt(sandboxes, containers, &listed, &mut out)
            }
            Observation::Relisted {
                sandboxes,
                containers,
                sandbox_ids,
                container_ids,
                listed_at_ns,
            } => {
                let listed = Listed {
                    sandbox_ids,
                    container_ids,
                    at_ns: Some(listed_at_ns),
                };
                self.rebuilt(sandboxes, containers, &listed, &mut out)
            }
        }
        out
    }
}
