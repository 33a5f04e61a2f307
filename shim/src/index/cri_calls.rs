//! The mutating CRI calls kubelet makes, folded into the index.

use podward_api::cri;
use podward_api::shim::v1::{
    Container, ContainerEventKind, ContainerState, Delivery, Sandbox, SandboxEventKind,
    SandboxState,
};

use super::convert;
use super::entries::{ContainerScan, Index};
use super::lists::{ContainerFacts, SandboxFacts};
use super::observation::Change;

impl Index {
    pub(super) fn sandbox_run(
        &mut self,
        config: cri::PodSandboxConfig,
        runtime_handler: String,
        sandbox_id: String,
        delivery: Delivery,
        at_ns: i64,
        out: &mut Vec<Change>,
    ) {
        self.existed(&sandbox_id, at_ns);
        let fresh = convert::sandbox_from_run(sandbox_id, config, runtime_handler, delivery, at_ns);
        let Some(cur) = self.sandboxes.get(&fresh.id) else {
            self.insert_new_sandbox(fresh, out);
            return;
        };
        // Already known (a List raced with the call): keep its times and state, add what only
        // the request knows and the delivery outcome.
        let was_undelivered = cur.run_delivery == Delivery::Undelivered as i32;
        let mut merged = fresh.clone();
        merged.state = cur.state;
        merged.created_at_ns = if cur.created_at_ns != 0 {
            cur.created_at_ns
        } else {
            fresh.created_at_ns
        };
        merged.pod_ip = cur.pod_ip.clone();
        merged.additional_ips = cur.additional_ips.clone();
        merged.stop_requested_at_ns = cur.stop_requested_at_ns;
        let id = merged.id.clone();
        self.merge_sandbox(merged, SandboxFacts { network: true }, out);
        if let Some(mut cur) = self.sandboxes.get_mut(&id) {
            let before = cur.run_delivery;
            cur.run_delivery = delivery as i32;
            if delivery == Delivery::Undelivered && !was_undelivered {
                out.push(Change::Sandbox(
                    SandboxEventKind::SandboxEventUndelivered,
                    Sandbox::clone(&cur),
                ));
            } else if before != cur.run_delivery {
                out.push(Change::Sandbox(
                    SandboxEventKind::SandboxEventUpdated,
                    Sandbox::clone(&cur),
                ));
            }
        }
    }

    pub(super) fn sandbox_stop(
        &mut self,
        id: &str,
        requested_at_ns: i64,
        completed: bool,
        out: &mut Vec<Change>,
    ) {
        let Some(mut cur) = self.sandboxes.get_mut(id) else {
            return;
        };
        let before = Sandbox::clone(&cur);
        if cur.stop_requested_at_ns == 0 {
            cur.stop_requested_at_ns = requested_at_ns;
        }
        if completed {
            cur.state = SandboxState::Notready as i32;
        }
        if *cur != before {
            let kind = if completed && before.state != cur.state {
                SandboxEventKind::SandboxEventStopped
            } else {
                SandboxEventKind::SandboxEventUpdated
            };
            out.push(Change::Sandbox(kind, Sandbox::clone(&cur)));
        }
    }

    /// Removes a sandbox (and, as the runtime does, any container still filed under it).
    pub(super) fn sandbox_remove(&mut self, id: &str, out: &mut Vec<Change>) {
        let orphans: Vec<String> = self
            .containers
            .scan::<ContainerScan>()
            .filter(|(_, c)| c.sandbox_id == id)
            .map(|(cid, _)| cid.clone())
            .collect();
        for c in orphans {
            self.container_remove(&c, out);
        }
        self.existed_at.remove(id);
        if let Some(s) = self.sandboxes.remove(id) {
            out.push(Change::Sandbox(SandboxEventKind::SandboxEventRemoved, s));
        }
    }

    pub(super) fn container_create(
        &mut self,
        sandbox_id: String,
        config: cri::ContainerConfig,
        container_id: String,
        delivery: Delivery,
        at_ns: i64,
        out: &mut Vec<Change>,
    ) {
        self.existed(&container_id, at_ns);
        let fresh =
            convert::container_from_create(container_id, sandbox_id, config, delivery, at_ns);
        let Some(cur) = self.containers.get(&fresh.id) else {
            self.insert_new_container(fresh, out);
            return;
        };
        let was_undelivered = cur.create_delivery == Delivery::Undelivered as i32;
        let mut merged = fresh.clone();
        merged.state = cur.state;
        merged.created_at_ns = if cur.created_at_ns != 0 {
            cur.created_at_ns
        } else {
            at_ns
        };
        let id = merged.id.clone();
        let facts = ContainerFacts {
            sandbox_id: true,
            times: false,
            envs: true,
        };
        self.merge_container(merged, facts, out);
        if let Some(mut cur) = self.containers.get_mut(&id) {
            let before = cur.create_delivery;
            cur.create_delivery = delivery as i32;
            if delivery == Delivery::Undelivered && !was_undelivered {
                out.push(Change::Container(
                    ContainerEventKind::ContainerEventUndelivered,
                    Container::clone(&cur),
                ));
            } else if before != cur.create_delivery {
                out.push(Change::Container(
                    ContainerEventKind::ContainerEventUpdated,
                    Container::clone(&cur),
                ));
            }
        }
    }

    pub(super) fn container_start(&mut self, id: &str, at_ns: i64, out: &mut Vec<Change>) {
        let Some(mut cur) = self.containers.get_mut(id) else {
            return;
        };
        // An exit event can beat the StartContainer response for a short-lived container: the
        // start is then already history.
        if cur.state >= ContainerState::Running as i32 {
            return;
        }
        cur.state = ContainerState::Running as i32;
        if cur.started_at_ns == 0 {
            cur.started_at_ns = at_ns;
        }
        out.push(Change::Container(
            ContainerEventKind::ContainerEventStarted,
            Container::clone(&cur),
        ));
    }

    pub(super) fn container_stop(
        &mut self,
        id: &str,
        timeout_seconds: i64,
        requested_at_ns: i64,
        completed: bool,
        out: &mut Vec<Change>,
    ) {
        let Some(mut cur) = self.containers.get_mut(id) else {
            return;
        };
        // The first StopContainer is the decision; kubelet repeats it on retries.
        if cur.stop_requested_at_ns != 0 || completed {
            return;
        }
        cur.stop_requested_at_ns = requested_at_ns;
        cur.stop_timeout_seconds = timeout_seconds;
        out.push(Change::Container(
            ContainerEventKind::ContainerEventUpdated,
            Container::clone(&cur),
        ));
    }

    pub(super) fn container_remove(&mut self, id: &str, out: &mut Vec<Change>) {
        self.existed_at.remove(id);
        if let Some(c) = self.containers.remove(id) {
            out.push(Change::Container(
                ContainerEventKind::ContainerEventRemoved,
                c,
            ));
        }
    }

    /// Marks the entries truncated (a kept field was past its bound), emitting UPDATED for
    /// each that was not marked yet.
    pub(super) fn truncated(
        &mut self,
        sandbox_ids: &[String],
        container_ids: &[String],
        out: &mut Vec<Change>,
    ) {
        for id in sandbox_ids {
            if let Some(mut cur) = self.sandboxes.get_mut(id)
                && !cur.truncated
            {
                cur.truncated = true;
                out.push(Change::Sandbox(
                    SandboxEventKind::SandboxEventUpdated,
                    Sandbox::clone(&cur),
                ));
            }
        }
        for id in container_ids {
            if let Some(mut cur) = self.containers.get_mut(id)
                && !cur.truncated
            {
                cur.truncated = true;
                out.push(Change::Container(
                    ContainerEventKind::ContainerEventUpdated,
                    Container::clone(&cur),
                ));
            }
        }
    }
}
