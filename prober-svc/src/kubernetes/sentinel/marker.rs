//! Marks one expired node's gated pods: lists the node's pods (`fieldSelector=spec.nodeName`,
//! at `resourceVersion=0`), and for each pod that lists the readiness gate and whose condition
//! says `True` (or `Unknown`), writes the condition `False` with reason [`SENTINEL_REASON`] — the
//! same server-side apply request as the prober's gate writer
//! ([`crate::kubernetes::gate::KubeWriter`]: field manager `podward-prober`, only that condition,
//! the pod's UID as a precondition), so the prober, when back, takes the condition over without
//! a conflict. One Warning event per pod marked.
//!
//! Never `True`, and never a pod whose condition is already `False` or absent (absent: the gate
//! already keeps the pod unready). The lease is checked again before every write, so a prober
//! that comes back while its node is being marked stops the marking.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;

use super::events::SentinelEvents;
use crate::clock::Clock;
use crate::kubernetes::gate::{ConditionWriter, Target, WriteError};
use crate::kubernetes::names::SENTINEL_REASON;
use crate::model::api_pod::{ConditionStatus, GateCondition};

/// What marking one node did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Marked {
    /// Gated pods found on the node.
    pub gated: usize,
    /// Of them written `False`.
    pub written: usize,
    /// Writes that failed (the node is tried again).
    pub failed: usize,
    /// The lease was renewed during the marking: stopped.
    pub renewed: bool,
}

/// Why a node could not be marked.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    /// Listing the node's pods failed.
    #[error("listing the pods of node {node}: {source}")]
    List {
        /// The node.
        node: String,
        /// The API's answer.
        source: kube::Error,
    },
}

/// Marks nodes' gated pods.
pub struct Marker {
    pods: Api<Pod>,
    nodes: Api<Node>,
    writer: Arc<dyn ConditionWriter>,
    events: SentinelEvents,
    condition_type: String,
    clock: Clock,
}

impl Marker {
    /// A marker listing through `client`, writing through `writer`, recording with `events`.
    pub fn new(
        client: kube::Client,
        writer: Arc<dyn ConditionWriter>,
        events: SentinelEvents,
        condition_type: &str,
        clock: Clock,
    ) -> Self {
        Self {
            pods: Api::all(client.clone()),
            nodes: Api::all(client),
            writer,
            events,
            condition_type: condition_type.to_owned(),
            clock,
        }
    }

    /// Marks node `node` (whose lease was last renewed at `renew_time`); `still_expired` is
    /// asked before each write.
    pub async fn mark(
        &self,
        node: &str,
        renew_time: &str,
        still_expired: impl Fn() -> bool,
    ) -> Result<Marked, MarkError> {
        let mut out = Marked::default();
        let message = format!(
            "podward-prober on node {node} stopped renewing its lease (last renewal {}); \
             readiness is unknown until it reports again",
            if renew_time.is_empty() {
                "never"
            } else {
                renew_time
            }
        );
        // At `resourceVersion=0`, as kubelet's and the prober's reflectors list: served from the
        // API server's watch cache, not a quorum read ranging over every pod of the cluster in
        // etcd for each expired node. Unpaged: kube-rs drops `resourceVersion=0` from a request
        // with a `limit`, and the watch cache answers it whole anyway (a `continue` is still
        // followed, should a server page it).
        let mut params = ListParams::default()
            .fields(&format!("spec.nodeName={node}"))
            .match_any();
        loop {
            let page = self
                .pods
                .list(&params)
                .await
                .map_err(|source| MarkError::List {
                    node: node.to_owned(),
                    source,
                })?;
            for pod in &page.items {
                let Some((target, status)) = self.gated(pod) else {
                    continue;
                };
                out.gated += 1;
                if !matches!(
                    status,
                    Some(ConditionStatus::True | ConditionStatus::Unknown)
                ) {
                    continue;
                }
                if !still_expired() {
                    out.renewed = true;
                    return Ok(out);
                }
                let condition = GateCondition {
                    status: ConditionStatus::False,
                    reason: SENTINEL_REASON.to_owned(),
                    message: message.clone(),
                    last_transition_time: rfc3339(self.clock.now_ns()),
                };
                match self
                    .writer
                    .write(&self.condition_type, &target, &condition)
                    .await
                {
                    Ok(_) => {
                        out.written += 1;
                        self.record(&target, &message);
                    }
                    // Gone, or another pod under the name now: nothing to mark.
                    Err(WriteError::Gone | WriteError::Conflict(_)) => {}
                    Err(e) => {
                        out.failed += 1;
                        tracing::warn!(node, pod = %target.name, namespace = %target.namespace,
                            error = %e, "cannot mark the readiness-gate condition False");
                    }
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => params = params.continue_token(&c),
                None => return Ok(out),
            }
        }
    }

    /// Whether Node `node` is gone: not found, or found with another uid than `owner` (the
    /// lease's owner; "" when the lease names none). A failed read counts as present: the
    /// lease is then judged as any other.
    pub async fn node_gone(&self, node: &str, owner: &str) -> bool {
        match self.nodes.get_opt(node).await {
            Ok(None) => true,
            Ok(Some(n)) => {
                !owner.is_empty() && n.metadata.uid.as_deref().is_some_and(|u| u != owner)
            }
            Err(e) => {
                tracing::debug!(node, error = %e, "cannot read the Node of an expired lease");
                false
            }
        }
    }

    /// The write target and the condition's status of a gated pod; `None` for other pods.
    fn gated(&self, pod: &Pod) -> Option<(Target, Option<ConditionStatus>)> {
        let spec = pod.spec.as_ref()?;
        let gated = spec
            .readiness_gates
            .iter()
            .flatten()
            .any(|g| g.condition_type == self.condition_type);
        if !gated {
            return None;
        }
        let meta = &pod.metadata;
        let target = Target {
            namespace: meta.namespace.clone()?,
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
        };
        let status = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == self.condition_type))
            .map(|c| ConditionStatus::parse(&c.status));
        Some((target, status))
    }

    /// The pod's event (queued: an event never holds the marking).
    fn record(&self, target: &Target, message: &str) {
        self.events.pod(
            &target.namespace,
            &target.name,
            &target.uid,
            SENTINEL_REASON,
            message,
        );
    }

    /// The events' recorder (the Node's events).
    pub fn events(&self) -> &SentinelEvents {
        &self.events
    }
}

/// Unix nanoseconds as the API's `Time` (RFC 3339, whole seconds).
fn rfc3339(ns: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(ns.div_euclid(1_000_000_000))
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
