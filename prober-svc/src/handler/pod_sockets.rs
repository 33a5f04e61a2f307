//! A bound per pod on the network probes in flight, each of which holds at most one socket (and
//! at most one response head, up to Go's 10 MiB): what one pod's targets can make the prober hold
//! at once, whatever they do.
//!
//! A probe socket is held only while its probe runs: redirects are followed one connection at a
//! time and a close never waits (`dialer::closer`), so "in flight" is every socket a pod's probes
//! hold. A pod at its bound waits, up to its probe's timeout, for one of its own probes to end;
//! past that its probe fails with the reason. Other pods never wait on it: each pod has its own
//! count, and nothing is shared but the total this module reports.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Network probes one pod may have in flight at once. kubelet has no such bound; a pod reaches
/// it only with dozens of containers whose targets all hang at the same time.
pub const PER_POD: usize = 64;

/// The counts of every pod with a network probe in flight.
#[derive(Debug)]
pub struct PodSockets {
    limit: usize,
    pods: Mutex<HashMap<Box<str>, Arc<Semaphore>>>,
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

/// One network probe's place in its pod's count; given back when dropped.
#[derive(Debug)]
pub struct InFlight {
    owner: Arc<PodSockets>,
    pod: Box<str>,
    permit: Option<OwnedSemaphorePermit>,
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

    /// A place for one more network probe of `pod`, waiting until `deadline` if the pod is at its
    /// bound.
    pub async fn acquire(
        self: &Arc<Self>,
        pod: &str,
        deadline: Instant,
    ) -> Result<InFlight, AtLimit> {
        let sem = {
            let mut pods = self.pods.lock();
            match pods.get(pod) {
                Some(s) => s.clone(),
                None => {
                    let s = Arc::new(Semaphore::new(self.limit));
                    pods.insert(pod.into(), s.clone());
                    s
                }
            }
        };
        let permit = match sem.clone().try_acquire_owned() {
            Ok(p) => Ok(p),
            Err(_) => match tokio::time::timeout_at(deadline, sem.clone().acquire_owned()).await {
                Ok(Ok(p)) => Ok(p),
                _ => Err(AtLimit { limit: self.limit }),
            },
        };
        drop(sem);
        match permit {
            Ok(p) => {
                if let Some(g) = &self.held {
                    g.inc();
                }
                Ok(InFlight {
                    owner: self.clone(),
                    pod: pod.into(),
                    permit: Some(p),
                })
            }
            Err(e) => {
                self.forget_if_idle(pod);
                Err(e)
            }
        }
    }

    /// Probes in flight for `pod`.
    pub fn in_flight(&self, pod: &str) -> usize {
        self.pods
            .lock()
            .get(pod)
            .map_or(0, |s| self.limit - s.available_permits())
    }

    /// Drops `pod`'s count once nothing holds or waits on it, so the map only has busy pods.
    fn forget_if_idle(&self, pod: &str) {
        let mut pods = self.pods.lock();
        if let Some(s) = pods.get(pod)
            && Arc::strong_count(s) == 1
            && s.available_permits() == self.limit
        {
            pods.remove(pod);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        drop(self.permit.take());
        if let Some(g) = &self.owner.held {
            g.dec();
        }
        self.owner.forget_if_idle(&self.pod);
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
}
