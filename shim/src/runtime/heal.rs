//! The index heals itself when observation is lost.
//!
//! The side reader follows every header block the peers accept, but observation can still be
//! lost: a connection whose bytes the reader cannot follow (junk, a bound of its bookkeeping, a
//! reader bug or panic), a watched call it cannot read (a compressed message), an observation
//! the decoder's full queue dropped, a decoder panic. Whatever kubelet does on such a connection
//! (kubelet keeps one for its whole life) would otherwise never reach the index.
//!
//! So every loss wakes [`run`], which relists from containerd at once and then every
//! `heal_period` while any open connection is unobserved, plus once more after the last one
//! closes. A relist is two List calls, then a Status call only for the objects that are new or
//! changed; the differences are published as ordinary events (`Observation::Relisted`).
//!
//! Worst-case staleness after a loss (docs/shim.md): a change made on an unobserved connection is
//! in the index once the first relist that starts after it has finished, i.e. within
//! `heal_period` + two relist durations.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use podward_api::daemon::admin::Readiness;
use tokio::sync::{Notify, watch};

use crate::index::Observation;
use crate::metrics::Metrics;
use crate::publish::Publisher;
use crate::runtime::rebuild::{self, KeptReader, Listed, RebuildError};

/// Losses of observation, shared by the relay's readers, the decoder and [`run`].
#[derive(Debug)]
pub struct Blindness {
    unobserved: AtomicUsize,
    wake: Notify,
    metrics: Metrics,
}

impl Blindness {
    /// No loss yet.
    pub fn new(metrics: Metrics) -> Arc<Self> {
        Arc::new(Self {
            unobserved: AtomicUsize::new(0),
            wake: Notify::new(),
            metrics,
        })
    }

    /// An open connection is no longer observed.
    pub fn connection_lost(&self) {
        self.unobserved.fetch_add(1, Ordering::Relaxed);
        self.metrics.unobserved_connections.inc();
        self.wake.notify_one();
    }

    /// An unobserved connection closed (its last changes still need one relist).
    pub fn connection_closed(&self) {
        self.unobserved.fetch_sub(1, Ordering::Relaxed);
        self.metrics.unobserved_connections.dec();
        self.wake.notify_one();
    }

    /// One call's observation was lost (compressed, dropped, not decoded).
    pub fn call_lost(&self) {
        self.wake.notify_one();
    }

    /// Open connections not observed.
    pub fn unobserved(&self) -> usize {
        self.unobserved.load(Ordering::Relaxed)
    }
}

/// Relists after every loss, and every `period` while a connection stays unobserved, until
/// `shutdown`. `readiness` gets a detail line while the index is being healed.
pub async fn run(
    socket: PathBuf,
    publisher: Publisher,
    blindness: Arc<Blindness>,
    period: Duration,
    readiness: Readiness,
    mut shutdown: watch::Receiver<bool>,
) {
    let metrics = blindness.metrics.clone();
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = blindness.wake.notified() => {}
        }
        loop {
            let started = tokio::time::Instant::now();
            let unobserved = blindness.unobserved();
            readiness.set_detail(Some(format!(
                "degraded: {unobserved} CRI connection(s) not observed; the index is relisted \
                 from containerd every {}",
                humantime::format_duration(period)
            )));
            match relist(&socket, &publisher, &metrics).await {
                Ok(refreshed) => {
                    metrics.relists.with_label_values(&["ok"]).inc();
                    tracing::info!(
                        unobserved,
                        refreshed,
                        ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        "index relisted from containerd after a loss of observation"
                    );
                }
                Err(e) => {
                    metrics.relists.with_label_values(&["error"]).inc();
                    tracing::warn!(error = %e, "relist after a loss of observation failed");
                }
            }
            if blindness.unobserved() == 0 {
                readiness.set_detail(None);
                break;
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(period) => {}
                _ = blindness.wake.notified() => {}
            }
        }
    }
}

/// Relists sandboxes and containers and folds in what is new or changed; the number of objects
/// read whole.
pub async fn relist(
    socket: &Path,
    publisher: &Publisher,
    metrics: &Metrics,
) -> Result<usize, RebuildError> {
    let channel = podward_api::socket::connect(socket.to_owned()).await?;
    let mut client = KeptReader::new(channel);
    let listed_at_ns = podward_api::time::now_ns();
    let listed = Listed::read(&mut client).await?;
    let env_names = listed.env_names();
    let Listed {
        sandboxes,
        containers,
        truncated,
        mut repairs,
    } = listed;
    let sandbox_ids: HashSet<String> = sandboxes.iter().map(|s| s.id.clone()).collect();
    let container_ids: HashSet<String> = containers.iter().map(|c| c.id.clone()).collect();
    let (sandboxes, containers) = publisher.with_index(|idx| {
        (
            sandboxes
                .into_iter()
                .filter(|s| !idx.knows_sandbox(s))
                .collect::<Vec<_>>(),
            containers
                .into_iter()
                .filter(|c| !idx.knows_container(c))
                .collect::<Vec<_>>(),
        )
    });
    let refreshed = sandboxes.len() + containers.len();
    let (sandbox_entries, container_entries, entry_repairs) =
        rebuild::read_entries(&client, sandboxes, containers, &truncated, &env_names).await;
    repairs.extend(entry_repairs);
    metrics.count_truncated(&sandbox_entries, &container_entries);
    for r in &repairs {
        metrics.count_repair(r);
    }
    publisher.apply(Observation::Relisted {
        sandboxes: sandbox_entries,
        containers: container_entries,
        sandbox_ids,
        container_ids,
        listed_at_ns,
    });
    Ok(refreshed)
}
