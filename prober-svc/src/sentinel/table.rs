//! The sentinel's view of the node leases, and which expired nodes may be marked now: the node
//! lifecycle controller's monitor and its rate-limited eviction queue, for leases.
//!
//! - A lease is judged on the sentinel's own clock, as the node lifecycle controller judges
//!   node leases: *when it saw* `renewTime` change (not the `renewTime` value, which another
//!   clock wrote). A lease it has not seen change for `leaseDurationSeconds` is expired; one
//!   that changes again is current at once.
//! - Expired nodes queue per zone (the lease's `topology.kubernetes.io/zone` label; leases
//!   without it share one zone) and leave each zone's queue at that zone's rate, one node per
//!   token of a bucket of burst 1 (the controller's `RateLimitedTimedQueue`). A zone's rate
//!   follows its state, as the controller's `ComputeZoneState` and `setLimiterInZone` set it:
//!   normal (0.1 nodes/s); partial disruption (more than 2 nodes and at least 55 % expired)
//!   slows to the secondary rate (0.01 nodes/s), or stops for a zone of at most 50 nodes;
//!   a fully expired zone goes at the normal rate unless every zone is fully expired, when
//!   nothing is marked at all (the sentinel's own network or the API is then the likely fault,
//!   not every prober at once); leaving that state gives every node not yet marked a fresh
//!   lease duration, as the controller resets its probe timestamps then.
//! - Unlike the controller, "every zone fully disrupted" needs more than
//!   [`PARTITION_MIN_EXPIRED`] - 1 expired nodes, the count partial disruption needs: a
//!   cluster of one node loses every lease with its one prober, and its pods must not keep
//!   `True` without bound (the controller marks a NotReady node's pods at once, whatever the
//!   disruption; only evictions stop).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// Fewest expired nodes that make "every zone fully disrupted" a likely partition (the
/// controller's partial disruption needs more than 2 not-ready nodes too).
pub const PARTITION_MIN_EXPIRED: usize = 3;

/// The node lifecycle controller's rates, as flags.
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

/// One zone's token bucket of burst 1.
#[derive(Debug)]
struct Limiter {
    qps: f64,
    next: Instant,
}

impl Limiter {
    fn take(&mut self, now: Instant) -> bool {
        if self.qps <= 0.0 || now < self.next {
            return false;
        }
        self.next = now + Duration::from_secs_f64(1.0 / self.qps);
        true
    }

    /// A new bucket at `qps`, full, as the controller's `SwapLimiter`.
    fn swap(&mut self, qps: f64, now: Instant) {
        if (qps - self.qps).abs() > f64::EPSILON {
            self.qps = qps;
            self.next = now;
        }
    }
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
}

/// Counts for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Node leases seen.
    pub leases: usize,
    /// Of them expired.
    pub expired: usize,
    /// Expired and waiting for their zone's rate limiter.
    pub waiting: usize,
}

/// The node leases and the expired-node queues.
#[derive(Debug)]
pub struct Table {
    rates: Rates,
    nodes: HashMap<String, NodeLease>,
    queues: BTreeMap<String, VecDeque<String>>,
    limiters: HashMap<String, Limiter>,
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
            limiters: HashMap::new(),
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
        for (zone, (state, size)) in &states {
            let qps = if all_full {
                0.0
            } else {
                match state {
                    ZoneState::Normal | ZoneState::FullDisruption => self.rates.normal,
                    ZoneState::PartialDisruption if *size > self.rates.large_cluster_threshold => {
                        self.rates.secondary
                    }
                    ZoneState::PartialDisruption => 0.0,
                }
            };
            let limiter = self
                .limiters
                .entry(zone.clone())
                .or_insert(Limiter { qps, next: now });
            limiter.swap(qps, now);
            let Some(queue) = self.queues.get_mut(zone) else {
                continue;
            };
            while !queue.is_empty() && limiter.take(now) {
                let Some(node) = queue.pop_front() else { break };
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.state = State::Admitted;
                    out.push(Due {
                        node,
                        renew_time: n.record.1.clone(),
                        zone: zone.clone(),
                    });
                }
            }
        }
        out
    }

    /// Gives node `node`'s token back to its zone (nothing needed marking there: a node the
    /// sentinel, or a leader before it, already marked), so it does not delay the next node.
    pub fn refund(&mut self, zone: &str, now: Instant) {
        if let Some(l) = self.limiters.get_mut(zone) {
            l.next = now;
        }
    }

    /// Puts admitted node `node` back at the front of its zone's queue (marking failed; it
    /// goes again at the next token).
    pub fn retry(&mut self, node: &str) {
        if let Some(n) = self.nodes.get_mut(node)
            && n.state == State::Admitted
        {
            n.state = State::Queued;
            let zone = n.zone.clone();
            self.queues
                .entry(zone)
                .or_default()
                .push_front(node.to_owned());
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(40);

    /// [`Table::due`] after every expiring node was looked up and found present.
    fn due(t: &mut Table, now: Instant) -> Vec<Due> {
        for (node, _) in t.expiring(now) {
            t.checked(&node, false);
        }
        t.due(now)
    }

    fn table(rates: Rates, nodes: usize, now: Instant) -> Table {
        let mut t = Table::new(rates);
        for i in 0..nodes {
            t.apply(&format!("n{i:02}"), "h", "t0", D, "", now);
        }
        t
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_expires_on_the_sentinels_clock_and_comes_back_when_it_changes() {
        let t0 = Instant::now();
        let mut t = table(Rates::default(), 10, t0);
        assert!(due(&mut t, t0 + D).is_empty(), "not before the duration");
        for i in 1..10 {
            t.apply(&format!("n{i:02}"), "h", "t1", D, "", t0 + D);
        }
        let due = due(&mut t, t0 + D + Duration::from_secs(1));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].node, "n00");
        assert_eq!(due[0].renew_time, "t0");
        // The same record again is no renewal; a new one is.
        assert!(!t.apply("n00", "h", "t0", D, "", t0 + D * 2));
        assert!(t.apply("n00", "h", "t2", D, "", t0 + D * 2));
        assert_eq!(t.counts().expired, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn normal_rate_is_one_node_per_ten_seconds() {
        let t0 = Instant::now();
        let mut t = table(Rates::default(), 20, t0);
        for i in 2..20 {
            t.apply(&format!("n{i:02}"), "h", "t1", D, "", t0 + D);
        }
        let at = t0 + D + Duration::from_secs(1);
        assert_eq!(due(&mut t, at).len(), 1);
        assert!(due(&mut t, at + Duration::from_secs(9)).is_empty());
        assert_eq!(due(&mut t, at + Duration::from_secs(10)).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn partial_disruption_slows_or_stops_and_full_disruption_everywhere_stops() {
        let t0 = Instant::now();
        let at = t0 + D + Duration::from_secs(1);
        // 6 of 10 expired: partial disruption; a zone of at most 50 nodes is not marked.
        let mut t = table(Rates::default(), 10, t0);
        for i in 6..10 {
            t.apply(&format!("n{i:02}"), "h", "t1", D, "", t0 + D);
        }
        assert!(due(&mut t, at).is_empty());
        assert_eq!(
            t.zone_states()[""],
            (ZoneState::PartialDisruption, 10),
            "zone state"
        );
        // A large zone: the secondary rate, one node per 100 s.
        let rates = Rates {
            large_cluster_threshold: 5,
            ..Rates::default()
        };
        let mut t = table(rates.clone(), 10, t0);
        for i in 6..10 {
            t.apply(&format!("n{i:02}"), "h", "t1", D, "", t0 + D);
        }
        assert_eq!(due(&mut t, at).len(), 1);
        for step in [99, 100] {
            // The healthy nodes keep renewing.
            let now = at + Duration::from_secs(step);
            for i in 6..10 {
                t.apply(&format!("n{i:02}"), "h", &format!("t{step}"), D, "", now);
            }
            let due = due(&mut t, now);
            assert_eq!(due.len(), usize::from(step == 100), "at +{step}s: {due:?}");
        }
        // Every node expired (every zone fully disrupted): nothing.
        let mut t = table(rates, 10, t0);
        assert!(due(&mut t, at).is_empty());
        assert_eq!(t.counts().waiting, 10);
        // One comes back: the others get a fresh duration rather than being marked at once.
        t.apply("n00", "h", "t9", D, "", at + Duration::from_secs(1));
        assert!(due(&mut t, at + Duration::from_secs(1)).is_empty());
        assert_eq!(t.counts().expired, 0);
        let later = at + Duration::from_secs(1) + D + Duration::from_secs(1);
        t.apply("n00", "h", "t10", D, "", later);
        assert_eq!(
            due(&mut t, later).len(),
            1,
            "9 of 10: partial, at the secondary rate"
        );
        assert_eq!(t.counts().expired, 9);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_whose_node_is_gone_is_never_marked_nor_counted() {
        let t0 = Instant::now();
        let mut t = table(Rates::default(), 5, t0);
        for i in 3..5 {
            t.apply(&format!("n{i:02}"), "h", "t1", D, "", t0 + D);
        }
        let at = t0 + D + Duration::from_secs(1);
        let expiring = t.expiring(at);
        assert_eq!(expiring.len(), 3);
        assert!(t.due(at).is_empty(), "not before the Nodes were looked up");
        // n00 and n01 are gone: only n02 counts, 1 of 3: a normal zone, marked.
        for (node, _) in expiring {
            t.checked(&node, node != "n02");
        }
        let due = t.due(at);
        assert_eq!(due.len(), 1, "{due:?}");
        assert_eq!(due[0].node, "n02");
        assert_eq!(t.zone_states()[""], (ZoneState::Normal, 3));
        assert!(t.expiring(at).is_empty(), "looked up once per expiry");
        // Renewed again (a new Node under the name, a prober back): followed again.
        t.apply("n00", "h", "t2", D, "", at);
        assert_eq!(t.zone_states()[""], (ZoneState::Normal, 4));
    }
}
