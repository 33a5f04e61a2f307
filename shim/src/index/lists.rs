//! Merging what List and Status responses (and rebuilds) say into the index.

use std::collections::HashSet;

use podward_api::cri;
use podward_api::shim::v1::{
    Container, ContainerEventKind, ContainerState, Sandbox, SandboxEventKind, SandboxState,
};

use super::convert;
use super::entries::{ContainerScan, Index, SandboxScan};
use super::observation::Change;

/// What a source knows about a sandbox, so a merge never erases what only another source knew.
#[derive(Clone, Copy)]
pub(super) struct SandboxFacts {
    /// The source carries the network (pod IP and mode).
    pub network: bool,
}

/// What a source knows about a container.
#[derive(Clone, Copy)]
pub(super) struct ContainerFacts {
    /// The source carries the sandbox ID.
    pub sandbox_id: bool,
    /// The source carries start/finish times and the exit code.
    pub times: bool,
    /// The source carries the environment.
    pub envs: bool,
}

/// The event kind for a sandbox that went from `before` to `after`.
pub(super) fn sandbox_kind(before: &Sandbox, after: &Sandbox) -> SandboxEventKind {
    if before.state != after.state && after.state == SandboxState::Notready as i32 {
        SandboxEventKind::SandboxEventStopped
    } else {
        SandboxEventKind::SandboxEventUpdated
    }
}

/// The event kind for a container that went from `before` to `after`.
pub(super) fn container_kind(before: &Container, after: &Container) -> ContainerEventKind {
    if before.state != after.state {
        if after.state == ContainerState::Running as i32 {
            return ContainerEventKind::ContainerEventStarted;
        }
        if after.state == ContainerState::Exited as i32 {
            return ContainerEventKind::ContainerEventExited;
        }
    }
    // An exit first seen in a List (no details) and then completed by an event or a Status is
    // still the exit consumers wait for.
    if before.finished_at_ns == 0
        && after.finished_at_ns != 0
        && after.state == ContainerState::Exited as i32
    {
        return ContainerEventKind::ContainerEventExited;
    }
    ContainerEventKind::ContainerEventUpdated
}

impl Index {
    /// Merges `fresh` over the known sandbox (or inserts it), emitting the matching change.
    pub(super) fn merge_sandbox(
        &mut self,
        fresh: Sandbox,
        facts: SandboxFacts,
        out: &mut Vec<Change>,
    ) {
        let Some(mut cur) = self.sandboxes.get_mut(&fresh.id) else {
            self.insert_new_sandbox(fresh, out);
            return;
        };
        let before = Sandbox::clone(&cur);
        cur.name = fresh.name;
        cur.namespace = fresh.namespace;
        cur.uid = fresh.uid;
        cur.attempt = fresh.attempt;
        // A sandbox never becomes ready again once stopped (CRI), so an older READY answer that
        // races with a stop must not undo it.
        if !(cur.state == SandboxState::Notready as i32
            && fresh.state == SandboxState::Ready as i32)
        {
            cur.state = fresh.state;
        }
        cur.labels = fresh.labels;
        cur.annotations = fresh.annotations;
        cur.truncated |= fresh.truncated;
        if fresh.created_at_ns != 0 {
            cur.created_at_ns = fresh.created_at_ns;
        }
        if !fresh.runtime_handler.is_empty() {
            cur.runtime_handler = fresh.runtime_handler;
        }
        if facts.network {
            cur.pod_ip = fresh.pod_ip;
            cur.additional_ips = fresh.additional_ips;
            cur.host_network = fresh.host_network;
        }
        if *cur == before {
            cur.unchanged();
            return;
        }
        let kind = sandbox_kind(&before, &cur);
        out.push(Change::Sandbox(kind, Sandbox::clone(&cur)));
    }

    /// Merges `fresh` over the known container (or inserts it), emitting the matching change.
    pub(super) fn merge_container(
        &mut self,
        fresh: Container,
        facts: ContainerFacts,
        out: &mut Vec<Change>,
    ) {
        let Some(mut cur) = self.containers.get_mut(&fresh.id) else {
            self.insert_new_container(fresh, out);
            return;
        };
        let before = Container::clone(&cur);
        if facts.sandbox_id && !fresh.sandbox_id.is_empty() {
            cur.sandbox_id = fresh.sandbox_id;
        }
        cur.pod_uid = fresh.pod_uid;
        cur.name = fresh.name;
        cur.attempt = fresh.attempt;
        // States only move forward (created -> running -> exited): a List answer computed before
        // an exit event we already applied must not bring the container back to life.
        if fresh.state > cur.state || fresh.state == ContainerState::Unknown as i32 {
            cur.state = fresh.state;
        }
        if !fresh.image.is_empty() {
            cur.image = fresh.image;
        }
        cur.labels = fresh.labels;
        cur.annotations = fresh.annotations;
        cur.truncated |= fresh.truncated;
        if fresh.created_at_ns != 0 {
            cur.created_at_ns = fresh.created_at_ns;
        }
        if facts.times {
            if fresh.started_at_ns != 0 {
                cur.started_at_ns = fresh.started_at_ns;
            }
            if fresh.finished_at_ns != 0 {
                cur.finished_at_ns = fresh.finished_at_ns;
                cur.exit_code = fresh.exit_code;
            }
            cur.reason = fresh.reason;
            cur.message = fresh.message;
            if cur.reason == "OOMKilled" {
                cur.oom_killed = true;
            }
        }
        if facts.envs && !fresh.envs.is_empty() {
            cur.envs = fresh.envs;
        }
        if *cur == before {
            cur.unchanged();
            return;
        }
        let kind = container_kind(&before, &cur);
        out.push(Change::Container(kind, Container::clone(&cur)));
    }

    /// Whether a listed sandbox is known as it is listed (a relist reads it whole otherwise).
    pub fn knows_sandbox(&self, p: &cri::PodSandbox) -> bool {
        self.sandboxes
            .view::<SandboxScan>(&p.id)
            .is_some_and(|cur| cur.state == convert::sandbox_state(p.state))
    }

    /// Whether a listed container is known as it is listed: same state and, once exited, its
    /// exit already known (a List carries no exit code).
    pub fn knows_container(&self, c: &cri::Container) -> bool {
        self.containers
            .view::<ContainerScan>(&c.id)
            .is_some_and(|cur| {
                cur.state == convert::container_state(c.state)
                    && (cur.state != ContainerState::Exited as i32 || cur.finished_at_ns != 0)
            })
    }

    /// Records that `id` existed in containerd at `at_ns`.
    pub(super) fn existed(&mut self, id: &str, at_ns: i64) {
        match self.existed_at.get_mut(id) {
            Some(t) => *t = (*t).max(at_ns),
            None => {
                self.existed_at.insert(id.to_owned(), at_ns);
            }
        }
    }

    /// Whether a List sent at `listed_at_ns` that lacks `id` shows it gone: it is not known to
    /// have existed within [`LIST_GRACE_NS`] before that time.
    fn gone_by(&self, id: &str, listed_at_ns: i64) -> bool {
        self.existed_at
            .get(id)
            .is_none_or(|t| t.saturating_add(LIST_GRACE_NS) < listed_at_ns)
    }

    pub(super) fn sandbox_list(
        &mut self,
        items: Vec<cri::PodSandbox>,
        complete: bool,
        listed_at_ns: i64,
        out: &mut Vec<Change>,
    ) {
        let seen: HashSet<String> = items.iter().map(|p| p.id.clone()).collect();
        for p in items {
            self.existed(&p.id, listed_at_ns);
            let facts = SandboxFacts { network: false };
            self.merge_sandbox(convert::sandbox_from_list(p), facts, out);
        }
        if complete {
            let gone: Vec<String> = self
                .sandboxes
                .ids()
                .filter(|id| !seen.contains(*id) && self.gone_by(id, listed_at_ns))
                .cloned()
                .collect();
            for id in gone {
                self.sandbox_remove(&id, out);
            }
        }
    }

    pub(super) fn container_list(
        &mut self,
        items: Vec<cri::Container>,
        complete: bool,
        listed_at_ns: i64,
        out: &mut Vec<Change>,
    ) {
        let seen: HashSet<String> = items.iter().map(|c| c.id.clone()).collect();
        for c in items {
            self.existed(&c.id, listed_at_ns);
            let facts = ContainerFacts {
                sandbox_id: true,
                times: false,
                envs: false,
            };
            self.merge_container(convert::container_from_list(c), facts, out);
        }
        if complete {
            let gone: Vec<String> = self
                .containers
                .ids()
                .filter(|id| !seen.contains(*id) && self.gone_by(id, listed_at_ns))
                .cloned()
                .collect();
            for id in gone {
                self.container_remove(&id, out);
            }
        }
    }

    pub(super) fn sandbox_status(
        &mut self,
        status: cri::PodSandboxStatus,
        host_network: Option<bool>,
        out: &mut Vec<Change>,
    ) {
        let fresh = convert::sandbox_from_status(status, host_network);
        self.merge_sandbox(fresh, SandboxFacts { network: true }, out);
    }

    pub(super) fn container_status(
        &mut self,
        status: cri::ContainerStatus,
        sandbox_id: Option<String>,
        envs: Option<Vec<(String, String)>>,
        out: &mut Vec<Change>,
    ) {
        let mut fresh = convert::container_from_status(status);
        let facts = ContainerFacts {
            sandbox_id: sandbox_id.is_some(),
            times: true,
            envs: envs.is_some(),
        };
        if let Some(s) = sandbox_id {
            fresh.sandbox_id = s;
        }
        if let Some(e) = envs {
            fresh.envs = convert::envs(e);
        }
        self.merge_container(fresh, facts, out);
    }

    /// Merges a rebuild or relist from the runtime, keeping what only the CRI path knew, and
    /// removes what the runtime no longer lists.
    pub(super) fn rebuilt(
        &mut self,
        sandboxes: Vec<Sandbox>,
        containers: Vec<Container>,
        listed: &Listed,
        out: &mut Vec<Change>,
    ) {
        if let Some(at) = listed.at_ns {
            for id in listed.sandbox_ids.iter().chain(&listed.container_ids) {
                self.existed(id, at);
            }
        }
        for s in sandboxes {
            self.merge_sandbox(s, SandboxFacts { network: true }, out);
        }
        for c in containers {
            let facts = ContainerFacts {
                sandbox_id: true,
                times: true,
                envs: true,
            };
            self.merge_container(c, facts, out);
        }
        let gone = |idx: &Self, id: &String, created_at_ns: i64, ids: &HashSet<String>| {
            !ids.contains(id)
                && listed
                    .at_ns
                    .is_none_or(|at| created_at_ns < at && idx.gone_by(id, at))
        };
        let gone_c: Vec<String> = self
            .containers
            .scan::<ContainerScan>()
            .filter(|(id, c)| gone(self, id, c.created_at_ns, &listed.container_ids))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone_c {
            self.container_remove(&id, out);
        }
        let gone_s: Vec<String> = self
            .sandboxes
            .scan::<SandboxScan>()
            .filter(|(id, s)| gone(self, id, s.created_at_ns, &listed.sandbox_ids))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone_s {
            self.sandbox_remove(&id, out);
        }
    }
}

/// How long after an entry was last known to exist a List that lacks it is still not believed.
/// A List sent before containerd had the entry lacks it, and containerd's own List answers were
/// seen to leave out a sandbox for a few milliseconds right after its RunPodSandbox returned,
/// between Lists that held it (`e2e/tests/shim_list_race.rs`). Removals the shim sees happen
/// (RemovePodSandbox, RemoveContainer, containerd's delete event) apply at once; a List only
/// catches the ones it did not see, up to this much later.
pub(super) const LIST_GRACE_NS: i64 = 2_000_000_000;

/// What a rebuild or relist listed.
pub(super) struct Listed {
    pub(super) sandbox_ids: HashSet<String>,
    pub(super) container_ids: HashSet<String>,
    /// When the lists were taken (None: a rebuild, which replaces everything).
    pub(super) at_ns: Option<i64>,
}
