//! A bound per pod on the network probes in flight, each of which holds at most one socket (and
//! at most one response head, up to Go's 10 MiB): what one pod's targets can make the prober hold
//! at once, whatever they do.
//!
//! A probe socket is held only while its probe runs: redirects are followed one connection at a
//! time and a close never waits (`dialer::closer`), so "in flight" is every socket a pod's probes
//! hold. A pod at its bound waits, up to its probe's timeout, for one of its own probes to end;
//! past that its probe fails with the reason. Other pods never wait on it: each pod has its own
//! count, and nothing is shared but the total this module reports.
//!
//! A pod's count lives as long as something holds it: each of the pod's workers holds a
//! [`PodShare`] from its start to its end, and each probe in flight holds one too, so a probe
//! takes its place without a lookup in the map of pods (every holder of one pod shares the one
//! count, so the bound is the same however many hold it).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use prometheus::IntGauge;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Network probes one pod may have in flight at once. kubelet has no such bound; a pod reaches
/// it only with dozens of containers whose targets all hang at the same time.
pub const PER_POD: usize = 64;

/// The counts of every pod that something holds (a live worker, a probe in flight).
#[derive(Debug)]
pub struct PodSockets {
    limit: usize,
    /// Weak: a count goes when its last holder does (see [`PodCount`]'s `Drop`).
    pods: Mutex<HashMap<Box<str>, Weak<PodCount>>>,
    /// Probe sockets held, all pods (`podward_prober_sockets_held`), when exported.
    held: Option<IntGauge>,
}

/// A pod's probe could not start: the pod has `limit` network probes in flight.
#[derive(Debug, thiserror::Error)]
#[error(
    "probe not started: this pod already has {limit} network probes in flight (podward's per-pod limit); none ended within the probe's timeout"
)]
pub struct AtLimit {
    /// The per-pod bound.
    pub limit: usize,
}

/// One pod's count of network probes in flight.
#[derive(Debug)]
struct PodCount {
    owner: Arc<PodSockets>,
    pod: Box<str>,
    /// `limit` permits; a probe in flight has taken one.
    slots: Semaphore,
}

/// A hold on one pod's count, for probing that pod: a worker keeps one for its whole life.
#[derive(Debug, Clone)]
pub struct PodShare(Arc<PodCount>);

/// One network probe's place in its pod's count; given back when dropped.
#[derive(Debug)]
pub struct InFlight {
    count: Arc<PodCount>,
}

impl PodSockets {
    /// Counts with `limit` per pod, reporting the total on `held` if given.
    pub fn new(limit: usize, held: Option<IntGauge>) -> Arc<Self> {
        Arc::new(Self {
            limit: limit.max(1),
            pods: Mutex::new(HashMap::new()),
            held,
        })
    }

    /// `pod`'s count, the one every other holder of `pod` shares (made if none holds it).
    pub fn pod(self: &Arc<Self>, pod: &str) -> PodShare {
        let mut pods = self.pods.lock();
        if let Some(count) = pods.get(pod).and_then(Weak::upgrade) {
            return PodShare(count);
        }
        let count = Arc::new(PodCount {
            owner: self.clone(),
            pod: pod.into(),
            slots: Semaphore::new(self.limit),
        });
        pods.insert(pod.into(), Arc::downgrade(&count));
        PodShare(count)
    }

    /// A place for one more network probe of `pod`, waiting until `deadline` if the pod is at its
    /// bound ([`PodShare::acquire`] for a caller that holds no share).
    pub async fn acquire(
        self: &Arc<Self>,
        pod: &str,
        deadline: Instant,
    ) -> Result<InFlight, AtLimit> {
        self.pod(pod).acquire(deadline).await
    }

    /// Probes in flight for `pod`.
    pub fn in_flight(&self, pod: &str) -> usize {
        // Upgraded under the lock, dropped after it: a last holder's drop takes the lock.
        let count = self.pods.lock().get(pod).and_then(Weak::upgrade);
        count.map_or(0, |c| self.limit - c.slots.available_permits())
    }

    /// Pods whose count something holds.
    pub fn pods_held(&self) -> usize {
        self.pods.lock().len()
    }
}

impl PodShare {
    /// The pod's UID.
    pub fn uid(&self) -> &str {
        &self.0.pod
    }

    /// A place for one more network probe of this pod, waiting until `deadline` if the pod is at
    /// its bound.
    pub async fn acquire(&self, deadline: Instant) -> Result<InFlight, AtLimit> {
        let count = &self.0;
        let permit = match count.slots.try_acquire() {
            Ok(p) => p,
            Err(_) => match tokio::time::timeout_at(deadline, count.slots.acquire()).await {
                Ok(Ok(p)) => p,
                _ => {
                    return Err(AtLimit {
                        limit: count.owner.limit,
                    });
                }
            },
        };
        // Given back by `InFlight`'s drop, which holds the count itself (a borrowed permit
        // could not outlive this call).
        permit.forget();
        if let Some(g) = &count.owner.held {
            g.inc();
        }
        Ok(InFlight {
            count: count.clone(),
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.count.slots.add_permits(1);
        if let Some(g) = &self.count.owner.held {
            g.dec();
        }
    }
}

impl Drop for PodCount {
    /// The last holder is gone: forget the pod, unless a new count replaced this one meanwhile
    /// (made by [`PodSockets::pod`] between this count's last release and this drop).
    fn drop(&mut self) {
        let mut pods = self.owner.pods.lock();
        if pods.get(&*self.pod).is_some_and(|w| w.strong_count() == 0) {
            pods.remove(&*self.pod);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn counts(limit: usize) -> Arc<PodSockets> {
        PodSockets::new(limit, Some(IntGauge::new("held", "test").expect("gauge")))
    }

    #[tokio::test]
    async fn a_pod_at_its_bound_waits_for_its_own_probes_and_others_do_not() {
        let c = counts(2);
        let soon = || Instant::now() + Duration::from_millis(50);
        let a1 = c.acquire("a", soon()).await.expect("a 1");
        let _a2 = c.acquire("a", soon()).await.expect("a 2");
        // Pod a is full: its third probe fails after waiting; pod b is not affected.
        let started = Instant::now();
        let err = c.acquire("a", soon()).await.expect_err("a is at its bound");
        assert!(started.elapsed() >= Duration::from_millis(40));
        assert!(
            err.to_string().contains("2 network probes in flight"),
            "{err}"
        );
        let b = c.acquire("b", soon()).await.expect("b has its own bound");
        assert_eq!(c.held.as_ref().map(IntGauge::get), Some(3));
        // One of a's probes ends: the waiting one proceeds.
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move {
                c.acquire("a", Instant::now() + Duration::from_secs(5))
                    .await
                    .map(|_| ())
            })
        };
        tokio::task::yield_now().await;
        drop(a1);
        waiter.await.expect("join").expect("a slot came free");
        drop(b);
        assert_eq!(c.in_flight("b"), 0);
        assert!(!c.pods.lock().contains_key("b"), "idle pods are forgotten");
    }

    #[tokio::test]
    async fn a_held_share_keeps_its_pods_count_across_probes_and_every_holder_shares_the_bound() {
        let c = counts(2);
        let soon = || Instant::now() + Duration::from_millis(20);
        let worker1 = c.pod("a");
        let worker2 = c.pod("a");
        assert!(Arc::ptr_eq(&worker1.0, &worker2.0), "one count per pod");
        for _ in 0..3 {
            let probe = worker1.acquire(soon()).await.expect("a probe");
            assert_eq!(c.in_flight("a"), 1);
            drop(probe);
            // The count stays while a worker holds it: no map insert and remove per probe.
            assert_eq!(c.pods_held(), 1);
            assert!(Arc::ptr_eq(&c.pod("a").0, &worker1.0));
        }
        // Two holders, one bound: the pod's third probe waits, whichever worker starts it.
        let p1 = worker1.acquire(soon()).await.expect("1");
        let p2 = worker2.acquire(soon()).await.expect("2");
        worker1.acquire(soon()).await.expect_err("at the bound");
        worker2.acquire(soon()).await.expect_err("at the bound");
        // Pod b is not affected.
        drop(
            c.pod("b")
                .acquire(soon())
                .await
                .expect("b has its own bound"),
        );
        assert_eq!(c.held.as_ref().map(IntGauge::get), Some(2));
        // The workers end while a probe is still in flight: the count outlives them until the
        // probe ends, then the pod is forgotten.
        drop(worker1);
        drop(worker2);
        drop(p1);
        assert_eq!(c.in_flight("a"), 1);
        assert_eq!(c.pods_held(), 1);
        drop(p2);
        assert_eq!(c.pods_held(), 0, "a pod nothing holds is forgotten");
        assert_eq!(c.held.as_ref().map(IntGauge::get), Some(0));
    }
}
