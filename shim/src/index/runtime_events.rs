//! containerd's own events (task exit, OOM, container delete) folded into the index.
//!
//! These are what make exits visible within milliseconds: kubelet's relist only happens every
//! second or so.

use podward_api::shim::v1::{Container, ContainerEventKind, ContainerState, Sandbox, SandboxState};

use super::entries::Index;
use super::lists::sandbox_kind;
use super::observation::Change;

impl Index {
    pub(super) fn task_exit(
        &mut self,
        id: &str,
        exit_code: i32,
        exited_at_ns: i64,
        out: &mut Vec<Change>,
    ) {
        if let Some(mut c) = self.containers.get_mut(id) {
            // A repeated event (containerd may publish twice across a reconnect) changes nothing.
            if c.state == ContainerState::Exited as i32 && c.finished_at_ns != 0 {
                return;
            }
            c.state = ContainerState::Exited as i32;
            c.exit_code = exit_code;
            c.finished_at_ns = exited_at_ns;
            if c.oom_killed && c.reason.is_empty() {
                c.reason = "OOMKilled".to_owned();
            }
            out.push(Change::Container(
                ContainerEventKind::ContainerEventExited,
                Container::clone(&c),
            ));
            return;
        }
        // The sandbox's own (pause) task exiting means the sandbox is no longer ready.
        if let Some(mut s) = self.sandboxes.get_mut(id) {
            let before = Sandbox::clone(&s);
            s.state = SandboxState::Notready as i32;
            if *s != before {
                out.push(Change::Sandbox(
                    sandbox_kind(&before, &s),
                    Sandbox::clone(&s),
                ));
            }
        }
    }

    pub(super) fn task_oom(&mut self, id: &str, out: &mut Vec<Change>) {
        if let Some(mut c) = self.containers.get_mut(id) {
            if c.oom_killed {
                return;
            }
            c.oom_killed = true;
            out.push(Change::Container(
                ContainerEventKind::ContainerEventOom,
                Container::clone(&c),
            ));
        }
    }

    pub(super) fn deleted(&mut self, id: &str, out: &mut Vec<Change>) {
        if self.containers.contains(id) {
            self.container_remove(id, out);
        } else if self.sandboxes.contains(id) {
            self.sandbox_remove(id, out);
        }
    }
}
