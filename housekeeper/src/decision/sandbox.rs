//! Leaked sandboxes: RunPodSandbox results that never reached kubelet (the shim marks them
//! undelivered) and that kubelet has visibly moved past: a newer attempt of the same pod exists,
//! or no container was ever created in it. kubelet cannot clean these up, because it never
//! learned their IDs; a leaked sandbox also holds its name, so kubelet's retry fails with
//! "failed to reserve sandbox name" (containerd#12438).

use std::collections::HashSet;

use podward_api::shim::v1::{Delivery, Snapshot as ShimIndex};

use crate::sources::runtime::RuntimeView;

/// A sandbox to stop and remove, with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leak {
    /// Sandbox ID.
    pub sandbox_id: String,
    /// Pod UID.
    pub uid: String,
    /// Plain-words observations.
    pub evidence: Vec<String>,
}

/// Undelivered and superseded (or never used) sandboxes that still exist in the runtime,
/// sorted by sandbox ID.
pub fn leaked_sandboxes(runtime: &RuntimeView, shim: &ShimIndex) -> Vec<Leak> {
    let with_containers: HashSet<&str> = runtime
        .containers
        .iter()
        .map(|c| c.sandbox_id.as_str())
        .chain(shim.containers.iter().map(|c| c.sandbox_id.as_str()))
        .collect();
    let mut leaks = Vec::new();
    for sb in &shim.sandboxes {
        if sb.run_delivery != Delivery::Undelivered as i32 || sb.uid.is_empty() {
            continue;
        }
        // Only what the runtime still has; the shim's index may lag a removal.
        let Some(live) = runtime.sandboxes.iter().find(|s| s.id == sb.id) else {
            continue;
        };
        // An object of this pod the runtime listed but we could not read may be its container.
        if runtime.held_uids.contains(&live.uid) {
            continue;
        }
        let mut evidence = vec![format!(
            "RunPodSandbox result for sandbox {} (attempt {}) never reached kubelet",
            sb.id, sb.attempt
        )];
        let newer = runtime
            .sandboxes
            .iter()
            .filter(|s| s.uid == live.uid && s.id != live.id)
            .filter(|s| {
                s.attempt > live.attempt
                    || (s.attempt == live.attempt && s.created_at_ns > live.created_at_ns)
            })
            .max_by_key(|s| (s.attempt, s.created_at_ns));
        let unused = !with_containers.contains(sb.id.as_str());
        match (newer, unused) {
            (None, false) => continue,
            (Some(n), _) => evidence.push(format!(
                "superseded by sandbox {} (attempt {}) of the same pod",
                n.id, n.attempt
            )),
            (None, true) => {}
        }
        if unused {
            evidence.push("no container was ever created in it".to_owned());
        }
        leaks.push(Leak {
            sandbox_id: sb.id.clone(),
            uid: sb.uid.clone(),
            evidence,
        });
    }
    leaks.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
    leaks
}

#[cfg(test)]
mod tests {
    use podward_api::shim::v1::{Container, Sandbox};

    use super::*;
    use crate::sources::runtime::{ContainerInfo, ContainerPhase, SandboxInfo};

    fn rt_sb(id: &str, uid: &str, attempt: u32, created: i64) -> SandboxInfo {
        SandboxInfo {
            id: id.into(),
            uid: uid.into(),
            namespace: "ns".into(),
            name: "p".into(),
            attempt,
            ready: true,
            created_at_ns: created,
        }
    }

    fn shim_sb(id: &str, uid: &str, attempt: u32, delivery: Delivery) -> Sandbox {
        Sandbox {
            id: id.into(),
            uid: uid.into(),
            attempt,
            run_delivery: delivery as i32,
            ..Default::default()
        }
    }

    #[test]
    fn undelivered_and_superseded_or_unused_only() {
        let runtime = RuntimeView {
            sandboxes: vec![
                rt_sb("old", "u1", 0, 1),
                rt_sb("new", "u1", 1, 2),
                rt_sb("busy", "u2", 0, 1),
                rt_sb("idle", "u3", 0, 1),
                rt_sb("fine", "u4", 0, 1),
            ],
            containers: vec![ContainerInfo {
                id: "c".into(),
                sandbox_id: "busy".into(),
                pod_uid: "u2".into(),
                name: "app".into(),
                attempt: 0,
                phase: ContainerPhase::Running,
                created_at_ns: 3,
            }],
            ..Default::default()
        };
        let shim = ShimIndex {
            sandboxes: vec![
                shim_sb("old", "u1", 0, Delivery::Undelivered),
                shim_sb("new", "u1", 1, Delivery::Delivered),
                // Undelivered but kubelet used it anyway (a container exists): keep.
                shim_sb("busy", "u2", 0, Delivery::Undelivered),
                shim_sb("idle", "u3", 0, Delivery::Undelivered),
                shim_sb("fine", "u4", 0, Delivery::Delivered),
                // Undelivered but already gone from the runtime: nothing to do.
                shim_sb("gone", "u5", 0, Delivery::Undelivered),
            ],
            containers: vec![Container {
                id: "c".into(),
                sandbox_id: "busy".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let leaks = leaked_sandboxes(&runtime, &shim);
        let ids: Vec<_> = leaks.iter().map(|l| l.sandbox_id.as_str()).collect();
        assert_eq!(ids, ["idle", "old"]);
        assert!(
            leaks[1]
                .evidence
                .iter()
                .any(|e| e.contains("superseded by sandbox new"))
        );
        assert!(leaks[0].evidence.iter().any(|e| e.contains("no container")));
        // A pod with an object the runtime listed but we could not decode (its container, say)
        // is held: its "unused" sandbox is not a leak this pass.
        let mut held = runtime.clone();
        held.held_uids.insert("u3".to_owned());
        let ids: Vec<_> = leaked_sandboxes(&held, &shim)
            .into_iter()
            .map(|l| l.sandbox_id)
            .collect();
        assert_eq!(ids, ["old"]);
    }

    #[test]
    fn a_delivery_value_from_a_newer_shim_is_no_action() {
        // An idle, superseded sandbox: leaked if undelivered; with a delivery value this build
        // does not know (a newer shim's), nothing is done.
        let runtime = RuntimeView {
            sandboxes: vec![rt_sb("old", "u1", 0, 1), rt_sb("new", "u1", 1, 2)],
            ..Default::default()
        };
        let mut future = shim_sb("old", "u1", 0, Delivery::Undelivered);
        future.run_delivery = 7;
        let shim = ShimIndex {
            sandboxes: vec![future, shim_sb("new", "u1", 1, Delivery::Delivered)],
            ..Default::default()
        };
        assert!(leaked_sandboxes(&runtime, &shim).is_empty());
    }
}
