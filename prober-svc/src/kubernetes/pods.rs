//! The node's pods from the API server: a kube-rs `watcher` on `pods` with
//! `fieldSelector=spec.nodeName=<node>` (a list at `resourceVersion=0` from the watch cache, then
//! a watch with bookmarks; a `410 Gone`
//! relists, a dropped connection resumes from the last resource version, kube-rs's default
//! backoff between failures), folded into a [`PodSink`] as [`ApiPod`]s.
//!
//! A reflector in kube-rs's sense, except that the store keeps the [`ApiPod`] facts rather than
//! whole `Pod` objects (a `Pod` is kilobytes, the facts a few hundred bytes; 10,000 pods is the
//! design point). A relist replaces the view: pods missing from it are deleted from the sink
//! once the list is complete, never before.

use std::collections::HashSet;
use std::future::Future;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::convert::api_pod;
use super::metrics::ApiMetrics;
use crate::model::api_pod::ApiPod;

/// Where the reflector's view goes.
pub trait PodSink: Send + Sync {
    /// A pod was listed, added or changed.
    fn apply(&self, pod: ApiPod);
    /// Pod `uid` is gone from the node (deleted, or absent from a relist).
    fn delete(&self, uid: &str);
    /// The UIDs the sink holds now (a relist deletes those it did not see).
    fn known(&self) -> Vec<String>;
}

/// The watcher's settings for the pods of `node`: lists at `resourceVersion=0` (any version,
/// served from the API server's watch cache, as kubelet's reflector lists) rather than a quorum
/// read that ranges over every pod of the cluster in etcd for each node at every relist. Unpaged:
/// kube-rs leaves `resourceVersion=0` out of a request with a `limit`, and the watch cache
/// answers such a list whole anyway.
pub fn watch_config(node: &str) -> watcher::Config {
    let mut config = watcher::Config::default()
        .fields(&format!("spec.nodeName={node}"))
        .any_semantic();
    config.page_size = None;
    config
}

/// Follows the pods of `node` through `api` into `sink` until `shutdown` resolves. Never
/// returns an error: the API being unreachable is retried with backoff, and the sink keeps
/// the last view meanwhile.
pub async fn reflect(
    api: Api<Pod>,
    node: &str,
    gate_type: &str,
    sink: &dyn PodSink,
    metrics: &ApiMetrics,
    shutdown: impl Future<Output = ()>,
) {
    let stream = watcher::watcher(api, watch_config(node)).default_backoff();
    tokio::pin!(stream);
    tokio::pin!(shutdown);
    let mut relist: Option<HashSet<String>> = None;
    let mut failing = false;
    loop {
        let next = tokio::select! {
            () = &mut shutdown => return,
            next = stream.next() => next,
        };
        let Some(next) = next else { return };
        match next {
            Ok(ev) => {
                if failing {
                    tracing::info!(
                        node,
                        "Kubernetes API reachable again; following the node's pods"
                    );
                    failing = false;
                }
                match ev {
                    Event::Init => relist = Some(HashSet::new()),
                    Event::InitApply(pod) => {
                        if let Some(p) = api_pod(&pod, gate_type) {
                            if let Some(seen) = &mut relist {
                                seen.insert(p.uid.clone());
                            }
                            sink.apply(p);
                        }
                    }
                    Event::InitDone => {
                        if let Some(seen) = relist.take() {
                            for uid in sink.known() {
                                if !seen.contains(&uid) {
                                    sink.delete(&uid);
                                }
                            }
                        }
                        metrics.synced.set(1);
                        tracing::info!(node, pods = sink.known().len(), "listed the node's pods");
                    }
                    Event::Apply(pod) => {
                        if let Some(p) = api_pod(&pod, gate_type) {
                            sink.apply(p);
                        }
                    }
                    Event::Delete(pod) => {
                        if let Some(uid) = pod.metadata.uid.as_deref() {
                            sink.delete(uid);
                        }
                    }
                }
            }
            Err(e) => {
                // kube-rs resumes from the last resource version (or relists after a `410`):
                // the view is kept and stays synced; the failure is counted, not node-wide.
                metrics.watch_errors.inc();
                let now_s = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                metrics.watch_last_error.set(now_s);
                if failing {
                    tracing::debug!(node, error = %e, "Kubernetes API: watching pods failed again");
                } else {
                    tracing::warn!(node, error = %e,
                        "Kubernetes API: cannot follow the node's pods; retrying with backoff (probes and kills go on; readiness-gate writes wait)");
                    failing = true;
                }
            }
        }
    }
}
