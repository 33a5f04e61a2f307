//! Exited containers beyond kubelet's GC policy (`MaxPerPodContainer = 1`, `MinAge = 0`): per
//! (pod UID, container name), the newest exited container is kept for `kubectl logs --previous`
//! and older ones are excess. This is kubelet's job, so by default they are only reported.

use std::collections::BTreeMap;

use crate::sources::runtime::{ContainerInfo, ContainerPhase, RuntimeView};

/// kubelet's `--maximum-dead-containers-per-container` default.
pub const MAX_PER_POD_CONTAINER: usize = 1;

/// An exited container beyond the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excess {
    /// Container ID.
    pub container_id: String,
    /// Pod UID.
    pub uid: String,
    /// Container name.
    pub name: String,
    /// Why it is excess.
    pub evidence: String,
}

/// Exited containers beyond `MAX_PER_POD_CONTAINER` per (pod UID, name), oldest last within
/// each unit; units in (UID, name) order.
pub fn exited_beyond_policy(runtime: &RuntimeView) -> Vec<Excess> {
    let mut units: BTreeMap<(&str, &str), Vec<&ContainerInfo>> = BTreeMap::new();
    for c in &runtime.containers {
        // A pod with an object we could not read is left alone: it may be one of the unit.
        if c.phase == ContainerPhase::Exited
            && !c.pod_uid.is_empty()
            && !runtime.held_uids.contains(&c.pod_uid)
        {
            units.entry((&c.pod_uid, &c.name)).or_default().push(c);
        }
    }
    let mut out = Vec::new();
    for ((uid, name), mut cs) in units {
        // Newest first, as kubelet's evictUnit sort (created_at, then attempt, then ID for ties).
        cs.sort_by(|a, b| {
            (b.created_at_ns, b.attempt, &b.id).cmp(&(a.created_at_ns, a.attempt, &a.id))
        });
        let total = cs.len();
        for c in cs.into_iter().skip(MAX_PER_POD_CONTAINER) {
            out.push(Excess {
                container_id: c.id.clone(),
                uid: uid.to_owned(),
                name: name.to_owned(),
                evidence: format!(
                    "{total} exited containers named {name:?} in pod {uid}; kubelet keeps \
                     {MAX_PER_POD_CONTAINER} (attempt {} is older)",
                    c.attempt
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, uid: &str, name: &str, attempt: u32, phase: ContainerPhase) -> ContainerInfo {
        ContainerInfo {
            id: id.into(),
            sandbox_id: "s".into(),
            pod_uid: uid.into(),
            name: name.into(),
            attempt,
            phase,
            created_at_ns: i64::from(attempt),
        }
    }

    #[test]
    fn keeps_the_newest_exited_per_pod_and_name() {
        let rt = RuntimeView {
            sandboxes: vec![],
            containers: vec![
                c("a0", "u", "app", 0, ContainerPhase::Exited),
                c("a1", "u", "app", 1, ContainerPhase::Exited),
                c("a2", "u", "app", 2, ContainerPhase::Exited),
                c("a3", "u", "app", 3, ContainerPhase::Running),
                c("s0", "u", "side", 0, ContainerPhase::Exited),
                c("v0", "v", "app", 0, ContainerPhase::Exited),
            ],
            ..Default::default()
        };
        let ids: Vec<_> = exited_beyond_policy(&rt)
            .into_iter()
            .map(|e| e.container_id)
            .collect();
        assert_eq!(ids, ["a1", "a0"]);
        // A held pod (an object of it could not be decoded: maybe one of the unit) is left alone.
        let mut held = rt.clone();
        held.held_uids.insert("u".to_owned());
        assert!(exited_beyond_policy(&held).is_empty());
    }
}
