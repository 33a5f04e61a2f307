//! The sentinel's view of the node leases, and which expired nodes may be marked now: the node
//! lifecycle controller's monitor, for leases.
//!
//! - A lease is judged on the sentinel's own clock, as the node lifecycle controller judges
//!   node leases: *when it saw* `renewTime` change (not the `renewTime` value, which another
//!   clock wrote). A lease it has not seen change for `leaseDurationSeconds` is expired; one
//!   that changes again is current at once.
//! - An expired node of a zone in the normal state is handed out at once, every one of them
//!   (the controller marks a not-ready node's pods NotReady at once; only its evictions are
//!   rate-limited): the API client's QPS is the only pace. Zones are the leases'
//!   `topology.kubernetes.io/zone` label (leases without it share one zone) and their state is
//!   the controller's `ComputeZoneState`: partial disruption (more than 2 nodes and at least
//!   the threshold, 55 %, expired) and full disruption (every node of the zone, at least
//!   [`PARTITION_MIN_EXPIRED`]) *hold* marking there: so many probers lost at once is more
//!   likely podward's own fault (a bad rollout, the sentinel's view) or a zone outage the node
//!   lifecycle controller handles, than each node's prober. Every zone fully disrupted holds
//!   everything; leaving that state gives every node not yet marked a fresh lease duration, as
//!   the controller resets its probe timestamps then.
//! - A node whose marking failed is retried after a backoff of its own (1 s doubling to 60 s)
//!   and never blocks the other nodes of its zone.
//! - Fewer than [`PARTITION_MIN_EXPIRED`] expired nodes are never a disruption: a cluster of
//!   one node loses every lease with its one prober, and its pods must not keep `True` without
//!   bound.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// Fewest expired nodes that make "every zone fully disrupted" a likely partition (the
/// controller's partial disruption needs more than 2 not-ready nodes too).
pub const PARTITION_MIN_EXPIRED: usize = 3;

/// The node lifecycle controller's rates, as flags. Only the zone threshold decides anything:
/// marking is not rate-limited (the rates are the controller's eviction rates), and every
/// partially disrupted zone is held whatever its size.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Nodes per second a healthy zone's expired nodes are marked at
    /// (`--node-eviction-rate`).
    pub normal: f64,
    /// Nodes per second in a partially disrupted zone (`--secondary-node-eviction-rate`).
    pub secondary: f64,
    /// Share of expired nodes at which a zone is partially disrupted
    /// (`--unhealthy-zone-threshold`).
    pub unhealthy_zone_threshold: f64,
    /// A partially disrupted zone of at most this many nodes is not marked at all
    /// (`--large-cluster-size-threshold`).
    pub large_cluster_threshold: usize,
}

impl Default for Rates {
    fn default() -> Self {
        Self {
            normal: 0.1,
            secondary: 0.01,
            unhealthy_zone_threshold: 0.55,
            large_cluster_threshold: 50,
        }
    }
}

/// A zone's state, as the node lifecycle controller names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    /// Fewer than the threshold expired.
    Normal,
    /// More than 2 nodes and at least the threshold expired.
    PartialDisruption,
    /// Every node of the zone expired.
    FullDisruption,
}

/// One node's lease as the sentinel saw it.
#[derive(Debug, Clone)]
struct NodeLease {
    /// Holder and `renewTime` as last seen: a change of either is a renewal.
    record: (String, String),
    /// When the record last changed, on the sentinel's clock.
    observed: Instant,
    duration: Duration,
    zone: String,
    state: State,
    /// The uid of the Node owning the lease ("" when it names none).
    owner: String,
    /// Failed markings in a row, and not before when the next try may come.
    failures: u32,
    not_before: Option<Instant>,
    /// Whether the Node was looked up since the lease last expired.
    checked: bool,
    /// The lease's Node is gone (deleted, or another Node under the name): the lease is
    /// ignored (never marked, not counted in its zone) until it is renewed.
    gone: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Current,
    /// Expired, waiting in its zone's queue.
    Queued,
    /// Expired and handed out to be marked.
    Admitted,
}

/// An expired node the sentinel may mark now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The node.
    pub node: String,
    /// The lease's last `renewTime`, as written ("" when it never had one).
    pub renew_time: String,
    /// Its zone ("" for leases without a zone label).
    pub zone: String,
    /// The uid of the Node owning the lease ("" when it names none).
    pub owner: String,
}

/// Counts for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Node leases seen.
    pub leases: usize,
    /// Of them expired.
    pub expired: usize,
    /// Expired and not handed out: held (a disrupted zone, every lease expired) or waiting
    /// for a retry.
    pub waiting: usize,
    /// Of them in a zone whose marking is held.
    pub held: usize,
}

/// The node leases and the expired-node queues.
#[derive(Debug)]
pub struct Table {
    rates: Rates,
    nodes: HashMap<String, NodeLease>,
    queues: BTreeMap<String, VecDeque<String>>,
    /// Zones whose marking is held now.
    held: Vec<String>,
    /// Every zone was fully disrupted at the last look.
    all_full: bool,
}

impl Table {
    /// An empty table rate-limited by `rates`.
    pub fn new(rates: Rates) -> Self {
        Self {
            rates,
            nodes: HashMap::new(),
            queues: BTreeMap::new(),
            held: Vec::new(),
            all_full: false,
        }
    }

    /// Node `node`'s lease as listed or watched: holder, `renewTime` (as written), duration
    /// and zone. Returns true when a node counted as expired renews (its prober is back).
    pub fn apply(
        &mut self,
        node: &str,
        holder: &str,
        renew_time: &str,
        duration: Duration,
        zone: &str,
        now: Instant,
    ) -> bool {
        let record = (holder.to_owned(), renew_time.to_owned());
        match self.nodes.get_mut(node) {
            Some(n) => {
                n.duration = duration;
                if n.zone != zone {
                    n.zone = zone.to_owned();
                }
                if n.record == record {
                    return false;
                }
                n.record = record;
                n.observed = now;
                n.checked = false;
                n.gone = false;
                n.failures = 0;
                n.not_before = None;
                let back = n.state != State::Current;
                n.state = State::Current;
                if back {
                    self.unqueue(node);
                }
                back
            }
            None => {
                self.nodes.insert(
                    node.to_owned(),
                    NodeLease {
                        record,
                        observed: now,
                        duration,
                        zone: zone.to_owned(),
                        state: State::Current,
                        owner: String::new(),
                        failures: 0,
                        not_before: None,
                        checked: false,
                        gone: false,
                    },
                );
                false
            }
        }
    }

    /// The uid of the Node that owns node `node`'s lease ("" when it names none).
    pub fn set_owner(&mut self, node: &str, uid: &str) {
        if let Some(n) = self.nodes.get_mut(node)
            && n.owner != uid
        {
            n.owner = uid.to_owned();
        }
    }

    /// Expired leases whose Node was not looked up yet, with their owner's uid: the sentinel
    /// asks the API whether each Node still exists ([`Table::checked`]) before the lease
    /// counts as expired.
    pub fn expiring(&self, now: Instant) -> Vec<(String, String)> {
        self.nodes
            .iter()
            .filter(|(_, n)| {
                n.state == State::Current
                    && !n.checked
                    && now.saturating_duration_since(n.observed) > n.duration
            })
            .map(|(name, n)| (name.clone(), n.owner.clone()))
            .collect()
    }

    /// Node `node` was looked up: `gone` when it no longer exists (its lease is then ignored).
    pub fn checked(&mut self, node: &str, gone: bool) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.checked = true;
            n.gone = gone;
        }
    }

    /// Node `node`'s lease is gone: the node is no longer followed.
    pub fn remove(&mut self, node: &str) {
        if self.nodes.remove(node).is_some() {
            self.unqueue(node);
        }
    }

    /// The nodes the table follows.
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    fn unqueue(&mut self, node: &str) {
        for q in self.queues.values_mut() {
            q.retain(|n| n != node);
        }
    }

    /// Whether node `node`'s lease is expired now (the marker asks again before each write).
    pub fn expired(&self, node: &str, now: Instant) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|n| now.saturating_duration_since(n.observed) > n.duration)
    }

    /// Judges every lease at `now`, queues the newly expired, and hands out the nodes the
    /// zones' rates allow now.
    pub fn due(&mut self, now: Instant) -> Vec<Due> {
        let mut newly: Vec<(String, String)> = Vec::new();
        for (name, n) in &mut self.nodes {
            let expired = now.saturating_duration_since(n.observed) > n.duration;
            if expired && n.state == State::Current && n.checked && !n.gone {
                n.state = State::Queued;
                newly.push((n.zone.clone(), name.clone()));
            }
        }
        // Oldest expiry first would need the instants; names sort the batch so that runs are
        // reproducible.
        newly.sort();
        for (zone, name) in newly {
            self.queues.entry(zone).or_default().push_back(name);
        }
        let mut states = self.zone_states();
        let all_full = states
            .values()
            .all(|(s, _)| *s == ZoneState::FullDisruption)
            && states.values().map(|(_, size)| size).sum::<usize>() >= PARTITION_MIN_EXPIRED;
        if self.all_full && !all_full {
            // Leaving "everything expired" (the API or the sentinel's network was the likely
            // fault): every node not yet marked gets a fresh lease duration to renew, as the
            // node lifecycle controller resets its probe timestamps when it leaves this mode.
            for (name, n) in &mut self.nodes {
                if n.state == State::Queued {
                    n.state = State::Current;
                    n.observed = now;
                    tracing::info!(node = %name, "leases renew again: a fresh lease duration for a node not marked yet");
                }
            }
            for q in self.queues.values_mut() {
                q.clear();
            }
            states = self.zone_states();
        }
        self.all_full = all_full;
        let mut out = Vec::new();
        self.held.clear();
        for (zone, (state, size)) in &states {
            let held = all_full
                || match state {
                    ZoneState::Normal => false,
                    ZoneState::PartialDisruption => true,
                    ZoneState::FullDisruption => *size >= PARTITION_MIN_EXPIRED,
                };
            if held {
                self.held.push(zone.clone());
                continue;
            }
            let Some(queue) = self.queues.get_mut(zone) else {
                continue;
            };
            // Every node due now, in queue order; one waiting for its retry keeps its place
            // and holds no other back.
            let mut waiting = VecDeque::new();
            while let Some(node) = queue.pop_front() {
                let Some(n) = self.nodes.get_mut(&node) else {
                    continue;
                };
                if n.not_before.is_some_and(|t| t > now) {
                    waiting.push_back(node);
                    continue;
                }
                n.state = State::Admitted;
                out.push(Due {
                    node,
                    renew_time: n.record.1.clone(),
                    zone: zone.clone(),
                    owner: n.owner.clone(),
                });
            }
            *queue = waiting;
        }
        out
    }

    /// Zones whose marking is held now (disrupted, or every lease expired).
    pub fn held_zones(&self) -> &[String] {
        &self.held
    }

    /// The expired nodes whose marking is held now, each with its zone and the uid of the Node
    /// owning its lease ("" when it names none), in zone then queue order.
    pub fn held_nodes(&self) -> Vec<Due> {
        self.held
            .iter()
            .filter_map(|zone| self.queues.get(zone).map(|q| (zone, q)))
            .flat_map(|(zone, queue)| {
                queue.iter().filter_map(move |node| {
                    self.nodes.get(node).map(|n| Due {
                        node: node.clone(),
                        renew_time: n.record.1.clone(),
                        zone: zone.clone(),
                        owner: n.owner.clone(),
                    })
                })
            })
            .collect()
    }

    /// Admitted node `node` was marked: its retry schedule starts over.
    pub fn marked(&mut self, node: &str) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.failures = 0;
            n.not_before = None;
        }
    }

    /// Puts admitted node `node` back in its zone's queue after a failed marking, due again
    /// after its own backoff (1 s doubling to 60 s); the other nodes go on meanwhile.
    pub fn retry(&mut self, node: &str, now: Instant) {
        if let Some(n) = self.nodes.get_mut(node)
            && n.state == State::Admitted
        {
            n.state = State::Queued;
            n.failures = n.failures.saturating_add(1);
            let backoff =
                Duration::from_secs(1 << (n.failures.min(7) - 1)).min(Duration::from_secs(60));
            n.not_before = Some(now + backoff);
            let zone = n.zone.clone();
            self.queues
                .entry(zone)
                .or_default()
                .push_back(node.to_owned());
        }
    }

    /// Each zone's state and size.
    pub fn zone_states(&self) -> BTreeMap<String, (ZoneState, usize)> {
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for n in self.nodes.values().filter(|n| !n.gone) {
            let c = counts.entry(n.zone.clone()).or_default();
            if n.state == State::Current {
                c.0 += 1;
            } else {
                c.1 += 1;
            }
        }
        counts
            .into_iter()
            .map(|(zone, (ready, expired))| {
                let total = ready + expired;
                #[allow(clippy::cast_precision_loss)]
                let share = expired as f64 / total.max(1) as f64;
                let state = if ready == 0 && expired > 0 {
                    ZoneState::FullDisruption
                } else if expired > 2 && share >= self.rates.unhealthy_zone_threshold {
                    ZoneState::PartialDisruption
                } else {
                    ZoneState::Normal
                };
                (zone, (state, total))
            })
            .collect()
    }

    /// Counts for the metrics.
    pub fn counts(&self) -> Counts {
        Counts {
            leases: self.nodes.len(),
            expired: self
                .nodes
                .values()
                .filter(|n| n.state != State::Current)
                .count(),
            waiting: self.queues.values().map(VecDeque::len).sum(),
            held: self
                .held
                .iter()
                .filter_map(|z| self.queues.get(z))
                .map(VecDeque::len)
                .sum(),
        }
    }
}

#[cfg(test)]
mod tests;
