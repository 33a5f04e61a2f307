//! The leases in `podward-prober status`: this node's lease (holder, last renewal, current or
//! expired by how long) and the sentinel's leader lease (holder, last renewal), as read from
//! the Kubernetes API — the view the sentinel acts on, printed beside the prober's own even
//! when the prober is gone (then they are what an operator needs).
//!
//! "Expired" here compares `renewTime` + `leaseDurationSeconds` with this machine's clock; the
//! sentinel judges on its own clock by when it *saw* a renewal, so near the edge the two can
//! disagree by the clocks' skew and one sentinel period.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::kubernetes::client;

/// How long `status` waits for the API before saying it cannot read it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What `status` reads: one lease, or why it could not.
pub type Read = Result<Option<Lease>, String>;

/// Where the leases are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseNames {
    /// The leases' namespace.
    pub namespace: String,
    /// This node (its lease's name).
    pub node: String,
    /// The sentinel's leader lease.
    pub election: String,
}

/// Reads both leases through `client`, each within [`READ_TIMEOUT`].
pub async fn read(client: kube::Client, names: &LeaseNames) -> (Read, Read) {
    let api: Api<Lease> = Api::namespaced(client, &names.namespace);
    let get = |name: String| {
        let api = api.clone();
        async move {
            match tokio::time::timeout(READ_TIMEOUT, api.get_opt(&name)).await {
                Ok(Ok(l)) => Ok(l),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {}s", READ_TIMEOUT.as_secs())),
            }
        }
    };
    tokio::join!(get(names.node.clone()), get(names.election.clone()))
}

/// Connects with `kubeconfig` (in-cluster without one) and renders the lease section at
/// `now_ns` (Unix nanoseconds); a configuration that does not load is said in the section.
pub async fn section(kubeconfig: Option<&Path>, names: &LeaseNames, now_ns: i64) -> String {
    let client = match client::load_config(kubeconfig).await {
        Ok(config) => kube::Client::try_from(config).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let (node, leader) = match client {
        Ok(c) => read(c, names).await,
        Err(e) => (Err(e.clone()), Err(e)),
    };
    render(names, &node, &leader, now_ns)
}

/// The lease section: two lines, or one saying the API cannot be read.
pub fn render(names: &LeaseNames, node: &Read, leader: &Read, now_ns: i64) -> String {
    let ns = &names.namespace;
    if let (Err(a), Err(b)) = (node, leader)
        && a == b
    {
        return format!(
            "Leases: cannot read them from the Kubernetes API: {} (the sentinel's view is unknown)\n",
            clean(a)
        );
    }
    format!(
        "Node lease {ns}/{}: {}\nSentinel leader lease {ns}/{}: {}\n",
        clean(&names.node),
        node_state(node, now_ns),
        clean(&names.election),
        leader_state(leader, now_ns)
    )
}

/// What the node lease says: its holder, last renewal and duration, and whether it is current.
fn node_state(node: &Read, now_ns: i64) -> String {
    let l = match node {
        Err(e) => return format!("cannot read it from the Kubernetes API: {}", clean(e)),
        Ok(None) => {
            return "none (this prober has not been current yet, or cannot write it; the sentinel does not follow this node)".to_owned();
        }
        Ok(Some(l)) => l,
    };
    let spec = l.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    let duration = spec.lease_duration_seconds.unwrap_or(0);
    let renewed = spec.renew_time.as_ref().map(|t| t.0);
    let mut out = format!(
        "holder {}, {}, duration {duration}s: {}",
        if holder.is_empty() {
            "(none)".to_owned()
        } else {
            clean(holder)
        },
        renewal(renewed, now_ns),
        expiry(renewed, duration, now_ns)
    );
    // What the prober reports without withdrawing its lease (a resumed watch, a pod refused).
    if let Some(p) = l
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::labels::PROBLEMS_ANNOTATION))
        .filter(|p| !p.is_empty())
    {
        out.push_str(&format!(
            "\n  problems reported by the prober (the lease holds): {}",
            clean(p)
        ));
    }
    out
}

/// Whether a lease last renewed at `renewed` for `duration` seconds is current at `now_ns`.
fn expiry(renewed: Option<k8s_openapi::jiff::Timestamp>, duration: i32, now_ns: i64) -> String {
    let Some(t) = renewed else {
        return "never renewed".to_owned();
    };
    let expires_ns = t.as_nanosecond() + i128::from(duration) * 1_000_000_000;
    let left = expires_ns - i128::from(now_ns);
    if left > 0 {
        format!("current (expires in {})", span(left))
    } else {
        format!(
            "EXPIRED {} ago: the sentinel marks this node's gated pods False (ProberNotReporting)",
            span(-left)
        )
    }
}

/// What the sentinel's leader lease says: its leader and last renewal.
fn leader_state(leader: &Read, now_ns: i64) -> String {
    let l = match leader {
        Err(e) => return format!("cannot read it from the Kubernetes API: {}", clean(e)),
        Ok(None) => {
            return "none (no sentinel has run here: expired node leases are not acted on)"
                .to_owned();
        }
        Ok(Some(l)) => l,
    };
    let spec = l.spec.clone().unwrap_or_default();
    let renewed = spec.renew_time.as_ref().map(|t| t.0);
    match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        Some(h) => format!("leader {}, {}", clean(h), renewal(renewed, now_ns)),
        None => format!(
            "no leader (released, {}; a replica takes it at its next try)",
            renewal(renewed, now_ns)
        ),
    }
}

/// "last renewal <time> (<age> ago)".
fn renewal(t: Option<k8s_openapi::jiff::Timestamp>, now_ns: i64) -> String {
    match t {
        None => "never renewed".to_owned(),
        Some(t) => {
            let ago = i128::from(now_ns) - t.as_nanosecond();
            let when = t.strftime("%Y-%m-%dT%H:%M:%SZ");
            if ago >= 0 {
                format!("last renewal {when} ({} ago)", span(ago))
            } else {
                format!("last renewal {when} ({} ahead of this clock)", span(-ago))
            }
        }
    }
}

/// A non-negative span of nanoseconds, coarse: `850ms`, `12s`, `3m4s`, `2h5m`, `3d4h`.
fn span(ns: i128) -> String {
    let ms = ns / 1_000_000;
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Text from the API (holder names, error messages) made safe for a terminal: control
/// characters become `?`, and it is cut at 200 characters.
fn clean(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if s.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    use super::*;
    use crate::kubernetes::lease::micro_time;

    const NOW: i64 = 1_790_000_000_000_000_000;

    fn names() -> LeaseNames {
        LeaseNames {
            namespace: "podward".into(),
            node: "node-a".into(),
            election: "podward-sentinel".into(),
        }
    }

    fn lease(holder: Option<&str>, renewed_s_ago: i64, duration: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(duration),
                renew_time: Some(micro_time(NOW - renewed_s_ago * 1_000_000_000)),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn current_expired_missing_and_unreadable() {
        let out = render(
            &names(),
            &Ok(Some(lease(Some("node-a"), 3, 40))),
            &Ok(Some(lease(Some("sentinel-0_ab"), 1, 15))),
            NOW,
        );
        assert!(
            out.contains("Node lease podward/node-a: holder node-a, last renewal ")
                && out.contains("(3s ago), duration 40s: current (expires in 37s)"),
            "{out}"
        );
        assert!(
            out.contains("Sentinel leader lease podward/podward-sentinel: leader sentinel-0_ab, last renewal ")
                && out.contains("(1s ago)"),
            "{out}"
        );
        let out = render(
            &names(),
            &Ok(Some(lease(Some("node-a"), 100, 40))),
            &Ok(Some(lease(None, 5, 1))),
            NOW,
        );
        assert!(
            out.contains("(1m40s ago), duration 40s: EXPIRED 1m0s ago"),
            "{out}"
        );
        assert!(out.contains("no leader (released"), "{out}");
        let mut l = lease(Some("node-a"), 3, 50);
        l.metadata.annotations = Some(
            [(
                crate::kubernetes::lease::labels::PROBLEMS_ANNOTATION.to_owned(),
                "1 pod(s) whose readiness-gate write keeps failing".to_owned(),
            )]
            .into(),
        );
        let out = render(&names(), &Ok(Some(l)), &Ok(None), NOW);
        assert!(
            out.contains("current (expires in 47s)\n  problems reported by the prober (the lease holds): 1 pod(s)"),
            "{out}"
        );
        let out = render(&names(), &Ok(None), &Ok(None), NOW);
        assert!(out.contains("Node lease podward/node-a: none"), "{out}");
        assert!(
            out.contains("leader lease podward/podward-sentinel: none"),
            "{out}"
        );
        let down: Read = Err("connection refused".into());
        let out = render(&names(), &down, &down, NOW);
        assert_eq!(
            out,
            "Leases: cannot read them from the Kubernetes API: connection refused (the sentinel's view is unknown)\n"
        );
        let out = render(
            &names(),
            &Ok(Some(lease(Some("evil\u{1b}[2J"), 3, 40))),
            &Err("403 forbidden".into()),
            NOW,
        );
        assert!(out.contains("holder evil?[2J"), "{out}");
        assert!(
            out.contains("podward-sentinel: cannot read it from the Kubernetes API: 403 forbidden"),
            "{out}"
        );
    }

    #[test]
    fn spans_are_coarse() {
        let s = |secs: i128| span(secs * 1_000_000_000);
        assert_eq!(span(850_000_000), "850ms");
        assert_eq!(s(12), "12s");
        assert_eq!(s(184), "3m4s");
        assert_eq!(s(7500), "2h5m");
        assert_eq!(s(3 * 86_400 + 4 * 3600), "3d4h");
    }
}
