//! The sentinel (`podward-prober sentinel`): readiness you can trust when a node's prober is
//! gone. kubelet's node lease has the node lifecycle controller behind it; the prober's node
//! lease ([`crate::kubernetes::lease`]) has this.
//!
//! - Every replica watches the node leases (one watch: the leases of podward's namespace with
//!   the node-lease label) into a [`Table`]; one replica leads ([`election`]).
//! - The leader, every period (5 s, the node lifecycle controller's `nodeMonitorPeriod`), hands
//!   every node whose lease expired in a zone that is not disrupted to the [`Marker`] at once
//!   ([`Table`]: a disrupted zone, or every lease expired, holds marking and says so): their
//!   gated pods' `podward.io/ready` goes `False` (reason `ProberNotReporting`), one event per
//!   pod. Never `True`: the node's prober, when back, writes its own results.
//! - Nodes without a lease (podward not installed there) are not followed, so never touched;
//!   an expired lease whose Node is gone (deleted, or another Node under the name: the lease's
//!   owner uid differs) is ignored, neither marked nor counted in its zone.
//! - The gated pods are listed per node when the node is marked, not watched: one watch (the
//!   leases) whatever the cluster's size, and the pods' memory only for a page at a time.

pub mod command;
pub mod election;
pub mod events;
pub mod marker;
pub mod metrics;
pub mod table;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use podward_api::daemon::stop::Stop;
use tokio::sync::watch;
use tokio::time::Instant;

pub use self::election::{ElectionTiming, Elector, Fence};
pub use self::events::SentinelEvents;
pub use self::marker::Marker;
pub use self::metrics::SentinelMetrics;
pub use self::table::{Rates, Table};
use crate::clock::Clock;
use crate::kubernetes::lease::{NODE_LEASE_LABEL, ZONE_LABEL};
use crate::kubernetes::names::SENTINEL_REASON;

/// Name of the sentinel's leader lease (in the same namespace as the node leases).
pub const DEFAULT_ELECTION_LEASE: &str = "podward-sentinel";

/// How the sentinel runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SentinelSettings {
    /// Namespace of the node leases and of the leader lease.
    pub namespace: String,
    /// This replica's name in the leader election (its pod name).
    pub identity: String,
    /// The leader lease's name.
    pub election_lease: String,
    /// Leader election timing.
    pub election: ElectionTiming,
    /// Between two looks at the leases.
    pub period: Duration,
    /// The node lifecycle controller's rates.
    pub rates: Rates,
    /// The readiness-gate condition type.
    pub gate_condition: String,
}

/// Runs the sentinel through `client` until `shutdown` resolves; `marker` writes; `election`
/// (a client whose requests have deadlines) keeps the leader lease. [`election::Lost`] when
/// this replica lost its leadership: it has stopped marking, and the process should exit.
pub async fn run(
    client: kube::Client,
    election: kube::Client,
    marker: Marker,
    settings: SentinelSettings,
    metrics: SentinelMetrics,
    clock: Clock,
    shutdown: impl Future<Output = ()>,
) -> Result<(), election::Lost> {
    let stop = Stop::new();
    let table = Arc::new(Mutex::new(Table::new(settings.rates.clone())));
    let (leading_tx, leading) = watch::channel(false);
    let fence = Fence::new(settings.election.renew_deadline);
    let elector = Elector::new(
        election,
        &settings.namespace,
        &settings.election_lease,
        &settings.identity,
        settings.election.clone(),
        clock,
    );
    // Aborted if this future is dropped (the process dies with its tasks, as on SIGKILL).
    let mut election = tokio::spawn(elector.run(leading_tx, fence.clone(), stop.stopped()));
    let leases: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let mut follow = Owned(tokio::spawn(follow_leases(
        leases,
        table.clone(),
        metrics.clone(),
        clock,
        marker.events().clone(),
        stop.stopped(),
    )));
    tracing::info!(namespace = %settings.namespace, identity = %settings.identity,
        period_s = settings.period.as_secs_f64(), normal_rate = settings.rates.normal,
        secondary_rate = settings.rates.secondary, "sentinel watching the node leases");
    let marking = mark_loop(
        &marker,
        &table,
        &metrics,
        leading,
        &fence,
        settings.period,
        clock,
    );
    tokio::pin!(shutdown);
    // Aborted if this future is dropped (the process dies with its tasks, as on SIGKILL).
    let mut guard = ElectionGuard(Some(election.abort_handle()));
    let lost = tokio::select! {
        () = &mut shutdown => None,
        () = marking => None,
        r = &mut election => Some(r),
    };
    stop.trigger();
    let result = match lost {
        Some(r) => r.unwrap_or(Ok(())),
        // The election task releases the leader lease on the way out.
        None => (&mut election).await.unwrap_or(Ok(())),
    };
    guard.0 = None;
    let _ = (&mut follow.0).await;
    result
}

/// Aborts the election task if the sentinel's future is dropped.
struct ElectionGuard(Option<tokio::task::AbortHandle>);

impl Drop for ElectionGuard {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

/// A task aborted when its owner is dropped.
struct Owned(tokio::task::JoinHandle<()>);

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The leader's loop: every period, marks the nodes the table hands out.
async fn mark_loop(
    marker: &Marker,
    table: &Mutex<Table>,
    metrics: &SentinelMetrics,
    mut leading: watch::Receiver<bool>,
    fence: &Fence,
    period: Duration,
    clock: Clock,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut held: Vec<String> = Vec::new();
    // Held nodes already told so on their Node: one event per node and hold, bounded by the
    // node leases.
    let mut announced: HashSet<String> = HashSet::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = leading.changed() => {
                if changed.is_err() {
                    return;
                }
                let lead = *leading.borrow_and_update();
                metrics.leader.set(i64::from(lead));
                continue;
            }
        }
        if !*leading.borrow() || !fence.holds() {
            continue;
        }
        // Expired leases whose Node is gone (an autoscaler removed it before the garbage
        // collector removed its lease) are ignored: looked up once per expiry, before they
        // count in their zone.
        let expiring = table.lock().expiring(Instant::now());
        for (node, owner) in expiring {
            let gone = marker.node_gone(&node, &owner).await;
            if gone {
                tracing::info!(node = %node, "node lease expired, but its Node is gone: ignored");
            }
            table.lock().checked(&node, gone);
        }
        let now = Instant::now();
        let due = {
            let mut t = table.lock();
            let before = t.counts().expired;
            let due = t.due(now);
            let c = t.counts();
            if t.held_zones() != held.as_slice() {
                held = t.held_zones().to_vec();
                if held.is_empty() {
                    tracing::info!("marking resumes: no zone is disrupted");
                } else {
                    tracing::warn!(zones = ?held, held_nodes = c.held,
                        "marking held: so many leases expired at once in these zones (or in every zone) that podward itself, not each prober, is the likely fault");
                }
            }
            let newly = c.expired.saturating_sub(before);
            if newly > 0 {
                metrics.expirations.inc_by(newly as u64);
                metrics.last_transition.set(clock.now_ns() / 1_000_000_000);
            }
            set_counts(metrics, &t);
            announce_held(marker, &t.held_nodes(), &mut announced);
            due
        };
        for d in due {
            // Fencing: each write only while this replica holds the leader lease.
            let check = || {
                *leading.borrow() && fence.holds() && table.lock().expired(&d.node, Instant::now())
            };
            tracing::warn!(node = %d.node, last_renewal = %d.renew_time, zone = %d.zone,
                "node lease expired: marking the node's gated pods not ready");
            match marker.mark(&d.node, &d.renew_time, check).await {
                Ok(m) => {
                    metrics.pods_marked.inc_by(m.written as u64);
                    metrics.errors.inc_by(m.failed as u64);
                    if m.written > 0 {
                        metrics.last_transition.set(clock.now_ns() / 1_000_000_000);
                        marker.events().node(&d.node, &d.owner, true, SENTINEL_REASON, &format!(
                            "podward-prober on this node stopped renewing its node lease (last renewal {}): {} gated pod(s) marked not ready",
                            if d.renew_time.is_empty() { "never" } else { &d.renew_time },
                            m.written
                        ));
                    }
                    tracing::info!(node = %d.node, gated = m.gated, marked = m.written,
                        failed = m.failed, renewed = m.renewed, "node marked");
                    let mut t = table.lock();
                    if m.failed > 0 {
                        t.retry(&d.node, Instant::now());
                    } else {
                        t.marked(&d.node);
                    }
                }
                Err(e) => {
                    metrics.errors.inc();
                    tracing::warn!(error = %e, "cannot mark an expired node; retrying after a backoff");
                    table.lock().retry(&d.node, Instant::now());
                }
            }
        }
    }
}

/// Says once on each newly held node's Node that its lease expired but its pods are left as
/// they are; a node no longer held may be told again at its next hold.
fn announce_held(marker: &Marker, now_held: &[table::Due], announced: &mut HashSet<String>) {
    announced.retain(|node| now_held.iter().any(|d| &d.node == node));
    for d in now_held {
        if announced.insert(d.node.clone()) {
            marker.events().node(&d.node, &d.owner, true, events::REASON_HELD, &format!(
                "podward-prober on this node stopped renewing its node lease (last renewal {}), but its gated pods are not marked: marking is held in zone {:?}, where so many leases expired at once (or in every zone) that podward itself, not this prober, is the likely fault",
                if d.renew_time.is_empty() { "never" } else { &d.renew_time },
                d.zone
            ));
        }
    }
}

fn set_counts(metrics: &SentinelMetrics, t: &Table) {
    let c = t.counts();
    let g = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    metrics.leases.set(g(c.leases));
    metrics.expired.set(g(c.expired));
    metrics.waiting.set(g(c.waiting));
    metrics.held.set(g(c.held));
}

/// Follows the node leases into `table` until `shutdown` (kube-rs's watcher: a paged list,
/// then a watch; a relist drops the leases it no longer sees).
async fn follow_leases(
    api: Api<Lease>,
    table: Arc<Mutex<Table>>,
    metrics: SentinelMetrics,
    clock: Clock,
    events: SentinelEvents,
    shutdown: impl Future<Output = ()>,
) {
    let stream = watcher::watcher(api, watcher::Config::default().labels(NODE_LEASE_LABEL))
        .default_backoff();
    tokio::pin!(stream);
    tokio::pin!(shutdown);
    let mut relist: Option<HashSet<String>> = None;
    loop {
        let next = tokio::select! {
            () = &mut shutdown => return,
            next = stream.next() => next,
        };
        let Some(next) = next else { return };
        let now = Instant::now();
        match next {
            Ok(Event::Init) => relist = Some(HashSet::new()),
            Ok(Event::InitApply(l)) => {
                if let Some(node) = apply(&table, &l, now, &metrics, clock, &events)
                    && let Some(seen) = &mut relist
                {
                    seen.insert(node);
                }
            }
            Ok(Event::InitDone) => {
                if let Some(seen) = relist.take() {
                    let mut t = table.lock();
                    for node in t.nodes() {
                        if !seen.contains(&node) {
                            t.remove(&node);
                        }
                    }
                    set_counts(&metrics, &t);
                }
            }
            Ok(Event::Apply(l)) => {
                apply(&table, &l, now, &metrics, clock, &events);
            }
            Ok(Event::Delete(l)) => {
                if let Some(node) = l.metadata.name.as_deref() {
                    let mut t = table.lock();
                    t.remove(node);
                    set_counts(&metrics, &t);
                }
            }
            Err(e) => tracing::warn!(error = %e, "watching the node leases failed; retrying"),
        }
    }
}

/// Folds lease `l` into `table`; the node's name.
fn apply(
    table: &Mutex<Table>,
    l: &Lease,
    now: Instant,
    metrics: &SentinelMetrics,
    clock: Clock,
    events: &SentinelEvents,
) -> Option<String> {
    let node = l.metadata.name.clone()?;
    let spec = l.spec.clone().unwrap_or_default();
    let renew = spec
        .renew_time
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(Duration::from_secs(50), Duration::from_secs);
    let zone = l
        .metadata
        .labels
        .as_ref()
        .and_then(|ls| ls.get(ZONE_LABEL))
        .map_or("", String::as_str);
    let owner = l
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Node" && o.name == node)
        .map_or("", |o| o.uid.as_str());
    let mut t = table.lock();
    let back = t.apply(
        &node,
        spec.holder_identity.as_deref().unwrap_or(""),
        &renew,
        duration,
        zone,
        now,
    );
    t.set_owner(&node, owner);
    if back {
        tracing::info!(node = %node, "node lease renewed again: its prober reports");
        metrics.last_transition.set(clock.now_ns() / 1_000_000_000);
        events.node(
            &node,
            owner,
            false,
            events::REASON_BACK,
            "podward-prober on this node renews its node lease again: its pods' readiness is its own again",
        );
    }
    set_counts(metrics, &t);
    Some(node)
}
