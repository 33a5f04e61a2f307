//! Leader election on a Lease, client-go's `leaderelection` algorithm (15 s lease, 10 s renew
//! deadline, 2 s retry period by default), so that of the sentinel's replicas exactly one marks.
//!
//! Hand-written (≈150 lines): kube-rs has no leader election, and the crates that add one are
//! not among the project's dependencies. The algorithm is client-go's `tryAcquireOrRenew`:
//! read the lease; take it if it is free, ours, or *not seen to change* for its duration on our
//! own clock (the holder's clock is not trusted, as in client-go's `observedTime`); write it
//! back with the resource version read (a `409` means someone else won this round). A leader
//! that cannot renew within the renew deadline steps down before its lease can expire for the
//! others: every try is bounded by what is left of the renew deadline, and each write of the
//! leader checks its [`Fence`] first; a leader that lost its lease returns [`Lost`] and the
//! process exits. A leader that stops (SIGTERM) releases the lease, so the other takes over at
//! its next retry instead of after a lease duration.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::kubernetes::lease::micro_time;

/// Leader election timing (client-go's names and defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct ElectionTiming {
    /// How long a holder's lease stays valid for the others without a renewal.
    pub lease_duration: Duration,
    /// A leader that has not renewed for this long steps down.
    pub renew_deadline: Duration,
    /// Between tries to acquire or renew.
    pub retry_period: Duration,
}

impl Default for ElectionTiming {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// A leader lost its lease: it could not renew within the renew deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("lost the leader lease: not renewed within the renew deadline")]
pub struct Lost;

/// The leader's fencing: when it last renewed. A write is allowed only while that is within
/// the renew deadline, so a leader whose renewals hang stops writing before another replica can
/// take the lease over (it must wait out the longer lease duration). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Fence {
    renewed: std::sync::Arc<parking_lot::Mutex<Option<Instant>>>,
    deadline: Duration,
}

impl Fence {
    /// A fence for leases renewed within `renew_deadline`; not leading yet.
    pub fn new(renew_deadline: Duration) -> Self {
        Self {
            renewed: std::sync::Arc::default(),
            deadline: renew_deadline,
        }
    }

    fn renewed(&self, at: Instant) {
        *self.renewed.lock() = Some(at);
    }

    fn lost(&self) {
        *self.renewed.lock() = None;
    }

    /// Whether this replica holds the leader lease now: renewed within the renew deadline.
    pub fn holds(&self) -> bool {
        self.renewed
            .lock()
            .is_some_and(|at| at.elapsed() < self.deadline)
    }
}

/// One candidate.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: ElectionTiming,
    clock: Clock,
    /// The record last read (holder, renewTime) and when it was first seen so.
    observed: Option<((String, String), Instant)>,
}

impl Elector {
    /// Candidate `identity` for lease `name` of `namespace`, through `client`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: ElectionTiming,
        clock: Clock,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing,
            clock,
            observed: None,
        }
    }

    /// Campaigns (and leads) until `shutdown`; `leading` says whether this candidate leads,
    /// `fence` when it last renewed. Each try is bounded by what is left of the renew deadline
    /// (client-go's renew loop under its `renewDeadline` context), so a request that hangs
    /// cannot keep a leader leading. A leader that could not renew within the renew deadline
    /// steps down at once and returns [`Lost`] (kube-controller-manager exits then: a process
    /// that lost its lease starts afresh rather than keep state from its reign).
    pub async fn run(
        mut self,
        leading: watch::Sender<bool>,
        fence: Fence,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), Lost> {
        tokio::pin!(shutdown);
        let mut last_renew: Option<Instant> = None;
        let deadline = self.timing.renew_deadline;
        loop {
            let budget = last_renew.map_or(deadline, |at| deadline.saturating_sub(at.elapsed()));
            let ok = tokio::select! {
                () = &mut shutdown => break,
                ok = tokio::time::timeout(budget, self.try_acquire_or_renew()) => ok.unwrap_or_else(|_| {
                    tracing::debug!(identity = %self.identity, "a leader election try ran out of time");
                    false
                }),
            };
            let now = Instant::now();
            if ok {
                if last_renew.is_none() {
                    tracing::info!(identity = %self.identity, lease = %self.name, "became the leader");
                    fence.renewed(now);
                    leading.send_replace(true);
                }
                fence.renewed(now);
                last_renew = Some(now);
            } else if let Some(at) = last_renew
                && now.saturating_duration_since(at) >= deadline
            {
                fence.lost();
                leading.send_replace(false);
                tracing::error!(identity = %self.identity, lease = %self.name,
                    "could not renew the leader lease within the renew deadline: stopped marking; exiting");
                return Err(Lost);
            }
            let wait = jittered(self.timing.retry_period);
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        if last_renew.is_some() {
            fence.lost();
            leading.send_replace(false);
            self.release().await;
        }
        Ok(())
    }

    /// One round; true when this candidate holds the lease after it.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let now = Instant::now();
        let current = match self.api.get_opt(&self.name).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "reading the leader lease failed");
                return false;
            }
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None)),
            };
            return self
                .api
                .create(&PostParams::default(), &lease)
                .await
                .is_ok();
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let record = (
            holder.clone(),
            spec.renew_time
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
        );
        let observed_at = match &self.observed {
            Some((r, at)) if *r == record => *at,
            _ => {
                self.observed = Some((record, now));
                now
            }
        };
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.timing.lease_duration, Duration::from_secs);
        let ours = holder == self.identity;
        if !holder.is_empty() && !ours && now.saturating_duration_since(observed_at) < duration {
            return false;
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(if ours {
            LeaseSpec {
                renew_time: Some(micro_time(self.clock.now_ns())),
                lease_duration_seconds: Some(secs(self.timing.lease_duration)),
                ..spec
            }
        } else {
            self.spec(Some(transitions.saturating_add(1)))
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(l) => {
                let s = l.spec.unwrap_or_default();
                self.observed = Some((
                    (
                        s.holder_identity.unwrap_or_default(),
                        s.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
                    ),
                    now,
                ));
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "writing the leader lease failed");
                false
            }
        }
    }

    /// Gives the lease up (holder cleared, 1 s duration), client-go's `ReleaseOnCancel`.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(micro_time(self.clock.now_ns()));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(identity = %self.identity, "released the leader lease"),
            Err(e) => tracing::debug!(error = %e, "releasing the leader lease failed"),
        }
    }

    fn spec(&self, transitions: Option<i32>) -> LeaseSpec {
        let now = micro_time(self.clock.now_ns());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(secs(self.timing.lease_duration)),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: transitions,
            ..LeaseSpec::default()
        }
    }
}

fn secs(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// `d` with up to +20 % jitter (client-go's `JitterFactor` 1.2), so that candidates started
/// together do not try together.
fn jittered(d: Duration) -> Duration {
    use rand::Rng;
    d.mul_f64(rand::rng().random_range(1.0..1.2))
}
