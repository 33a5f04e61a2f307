//! Where pods come from: the shim's `Lifecycle/Watch` stream (a snapshot, then ordered events;
//! a `resync` snapshot replaces everything), and, while the shim is unreachable, containerd's
//! CRI polled directly so probes (and kills) keep working without the shim.
//!
//! The manager is only ever told about complete views: a failed read changes nothing, so a
//! source outage never looks like "all pods are gone".

pub mod convert;
pub mod cri;
pub mod index;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use podward_api::backoff::Backoff;
use podward_api::daemon::admin::Readiness;
use podward_api::limits::API_MESSAGE_BYTES;
use podward_api::shim::v1 as shim;
use podward_api::shim::v1::lifecycle_client::LifecycleClient;
use podward_api::tolerant::runtime::RuntimeReader;
use podward_api::wire::advertises;
use tokio::time::Instant;
use tonic::transport::Channel;

use self::convert::{shim_container, shim_sandbox};
use self::cri::CriPoller;
use self::index::NodeIndex;
use crate::metrics::Metrics;
use crate::pods::manager::Manager;

/// How the source reaches its peers.
pub struct SourceConfig {
    /// The shim's control socket.
    pub shim_socket: PathBuf,
    /// containerd's CRI channel (lazy, reconnecting).
    pub containerd: Channel,
    /// Probe address of host-network pods.
    pub node_ip: IpAddr,
    /// Interval of the containerd fallback poll.
    pub poll_interval: Duration,
    /// `/readyz`: set while the prober holds a complete view of the node (a shim snapshot
    /// applied, or the last containerd poll read), cleared while it can read neither — a
    /// prober that cannot see the node's pods is not ready, whatever it serves.
    pub readiness: Readiness,
}

/// Follows the shim (or containerd) until `shutdown` resolves. Never returns an error: peers
/// being down is normal, and is retried with [`Backoff`].
pub async fn follow(
    cfg: SourceConfig,
    manager: Manager,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let shim_up = metrics.source("shim");
    let cri_up = metrics.source("containerd");
    let mut backoff = Backoff::reconnect();
    let mut poller = CriPoller::new();
    let mut cri = RuntimeReader::new(cfg.containerd.clone());
    let readiness = cfg.readiness.clone();
    let mut next_poll = Instant::now();
    loop {
        let run = async {
            match podward_api::socket::connect(&cfg.shim_socket).await {
                Ok(ch) => {
                    let mut client =
                        LifecycleClient::new(ch).max_decoding_message_size(API_MESSAGE_BYTES);
                    match client.watch(shim::WatchRequest { from_seq: 0 }).await {
                        Ok(stream) => {
                            tracing::info!(socket = %cfg.shim_socket.display(), "following the shim");
                            shim_up.set(1.0);
                            cri_up.set(0.0);
                            let r = consume(
                                stream.into_inner(),
                                &manager,
                                cfg.node_ip,
                                &mut backoff,
                                &readiness,
                            )
                            .await;
                            shim_up.set(0.0);
                            readiness.set(false);
                            tracing::warn!(reason = %r, "lost the shim's Lifecycle stream; reconnecting");
                        }
                        Err(e) => tracing::debug!(error = %e, "shim Watch failed"),
                    }
                }
                Err(e) => tracing::debug!(error = %e, "shim unreachable"),
            }
        };
        tokio::select! {
            () = &mut shutdown => return,
            () = run => {}
        }
        // Shim down: read containerd directly, at most once per poll interval.
        if Instant::now() >= next_poll {
            next_poll = Instant::now() + cfg.poll_interval;
            tokio::select! {
                () = &mut shutdown => return,
                r = poller.poll(&mut cri, cfg.node_ip) => match r {
                    Ok(pods) => {
                        if cri_up.get() == 0.0 {
                            tracing::info!("shim is down; reading pods from containerd directly");
                        }
                        cri_up.set(1.0);
                        manager.sync_all(pods);
                        readiness.set(true);
                    }
                    Err(e) => {
                        cri_up.set(0.0);
                        readiness.set(false);
                        tracing::debug!(error = %e, "containerd unreachable too; keeping the last view");
                    }
                },
            }
        }
        let wait = backoff.next_delay().min(
            next_poll
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(50)),
        );
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Why the shim's Watch stream stopped.
#[derive(Debug, thiserror::Error)]
enum StreamEnd {
    /// The shim closed it.
    #[error("stream ended")]
    Closed,
    /// It failed (the shim went away, or a message was refused).
    #[error("{0}")]
    Failed(tonic::Status),
}

/// Applies a Watch stream until it ends; returns why it ended.
async fn consume(
    mut stream: tonic::Streaming<shim::WatchEvent>,
    manager: &Manager,
    node_ip: IpAddr,
    backoff: &mut Backoff,
    readiness: &Readiness,
) -> StreamEnd {
    let mut index = NodeIndex::new();
    loop {
        let ev = match stream.next().await {
            None => return StreamEnd::Closed,
            Some(Err(e)) => return StreamEnd::Failed(e),
            Some(Ok(ev)) => ev,
        };
        backoff.reset();
        if apply(&mut index, ev, manager, node_ip) {
            readiness.set(true);
        }
    }
}

/// Whether snapshot `s` is the node's whole set: its shim is connected to containerd and has
/// rebuilt its index from it (`complete`; a shim that does not advertise the capability has no
/// such field, and its connected snapshots are taken as whole, as that shim meant them).
pub fn is_whole(s: &shim::Snapshot) -> bool {
    s.runtime_connected
        && (s.complete || !advertises(&s.capabilities, podward_api::wire::SHIM_SNAPSHOT_COMPLETE))
}

/// Folds one Watch event into `index` and tells the manager what changed. True when the event
/// was a whole snapshot ([`is_whole`]): the view is then complete. A snapshot that is not whole
/// adds and refreshes pods but drops none (a pod it does not list may only be unknown to it
/// yet). An event kind this build does not know is no action: a newer shim's kind could mean
/// anything, removal included, and is never applied as an update.
pub fn apply(
    index: &mut NodeIndex,
    ev: shim::WatchEvent,
    manager: &Manager,
    node_ip: IpAddr,
) -> bool {
    use shim::watch_event::Event;
    use shim::{ContainerEventKind as C, SandboxEventKind as S};
    let mut whole = false;
    match ev.event {
        Some(Event::Snapshot(s)) => {
            whole = is_whole(&s);
            *index = NodeIndex::new();
            for sb in &s.sandboxes {
                index.put_sandbox(shim_sandbox(sb, node_ip));
            }
            for c in &s.containers {
                let (uid, info) = shim_container(c);
                index.put_container(&uid, info);
            }
            if whole {
                manager.sync_all(index.pods());
            } else {
                tracing::info!(
                    connected = s.runtime_connected,
                    complete = s.complete,
                    "the shim's snapshot is not the whole node yet; keeping every pod known"
                );
                for p in index.pods() {
                    manager.update_pod(p);
                }
            }
        }
        Some(Event::Sandbox(se)) => {
            let Some(sb) = se.sandbox else { return false };
            let uid = match S::try_from(se.kind) {
                Ok(S::SandboxEventRemoved) => index.remove_sandbox(&sb.id),
                Ok(
                    S::SandboxEventCreated
                    | S::SandboxEventStopped
                    | S::SandboxEventUpdated
                    | S::SandboxEventUndelivered,
                ) => {
                    let rec = shim_sandbox(&sb, node_ip);
                    let uid = rec.uid.clone();
                    index.put_sandbox(rec);
                    Some(uid)
                }
                Ok(S::Unspecified) | Err(_) => {
                    tracing::debug!(kind = se.kind, id = %sb.id, "unknown sandbox event kind; no action");
                    None
                }
            };
            if let Some(uid) = uid {
                refresh(index, manager, &uid);
            }
        }
        Some(Event::Container(ce)) => {
            let Some(c) = ce.container else { return false };
            let uid = match C::try_from(ce.kind) {
                Ok(C::ContainerEventRemoved) => index.remove_container(&c.id),
                Ok(
                    C::ContainerEventCreated
                    | C::ContainerEventStarted
                    | C::ContainerEventExited
                    | C::ContainerEventOom
                    | C::ContainerEventUpdated
                    | C::ContainerEventUndelivered,
                ) => {
                    let (uid, info) = shim_container(&c);
                    index.put_container(&uid, info);
                    Some(uid)
                }
                Ok(C::Unspecified) | Err(_) => {
                    tracing::debug!(kind = ce.kind, id = %c.id, "unknown container event kind; no action");
                    None
                }
            };
            if let Some(uid) = uid {
                refresh(index, manager, &uid);
            }
        }
        None => {}
    }
    whole
}

fn refresh(index: &mut NodeIndex, manager: &Manager, uid: &str) {
    match index.pod(uid) {
        Some(p) => manager.update_pod(p),
        None => {
            manager.remove_pod(uid);
            index.compact();
        }
    }
}

#[cfg(test)]
mod tests;
