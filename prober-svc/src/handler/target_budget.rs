//! The node-wide budget for what probe targets send: every byte a network probe reads from its
//! target (heads, bodies, TLS records, HTTP/2 frames) is charged to it until the probe ends.
//!
//! Go's limits (a 10 MiB head, a 10 KiB body, a 256 KiB TLS handshake message) are the semantics
//! of one probe; this budget bounds their sum, so that no number of hostile targets can make the
//! prober hold more than it was sized for. A probe reads through a [`Metered`] stream that takes
//! room from the budget in [`CHUNK`]s before it reads, and gives everything back when the probe
//! ends (the stream is dropped).
//!
//! Who waits when the budget is short is decided by what each pod holds. Every pod holding room
//! (or asking for its first) counts as one; while the budget's first three quarters have room, a
//! pod may hold up to its equal part of them; the last quarter is a reserve in which a pod may
//! hold up to its equal part of the reserve. So a pod whose probes hold much waits, and one whose
//! probes hold little (a usual answer fits one [`CHUNK`]) finds room: the pod holding the most is
//! the one that waits. A probe that cannot get room waits (its own timeout bounds the wait), then
//! fails saying so; every wait ends when some room is given back.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use prometheus::IntGauge;
use tokio::io::{AsyncRead, ReadBuf};

/// Room taken from the budget at a time (a usual probe answer needs one).
pub const CHUNK: usize = 16 << 10;

/// The budget when the prober's memory limit is unknown (no cgroup limit).
pub const DEFAULT_BUDGET: usize = 256 << 20;

/// The budget's share of the prober's memory limit: a byte a target sends may cost the prober
/// more than one byte while it is parsed (a kept copy of the head, HTTP/2's decoded header map),
/// and the prober needs the rest for itself.
pub const LIMIT_DIVISOR: u64 = 4;

/// The least budget: room for a few probes with Go's largest head.
pub const MIN_BUDGET: usize = 32 << 20;

/// The node-wide budget.
#[derive(Debug)]
pub struct TargetBudget {
    limit: usize,
    /// Part of `limit` only light pods may use.
    reserve: usize,
    state: Mutex<State>,
    /// Bytes held, all pods (`podward_prober_target_memory_bytes`), when exported.
    held: Option<IntGauge>,
}

#[derive(Debug, Default)]
struct State {
    used: usize,
    /// What each pod holds and how many of its probes wait (pods with neither are not kept).
    pods: HashMap<Arc<str>, PodState>,
    /// The most ever held at once (tests and the benchmark read it).
    peak: usize,
    /// Probes waiting for room, oldest first.
    waiters: VecDeque<Waker>,
}

/// One pod's part of the budget.
#[derive(Debug, Default, Clone, Copy)]
struct PodState {
    held: usize,
    /// Its probes waiting for room.
    waiting: usize,
}

/// A probe waited for room it did not get before its deadline: the budget's failure text.
#[derive(Debug, thiserror::Error)]
#[error(
    "probe answer not read: the node's memory budget for what probe targets send ({limit} bytes) is held by this pod's other probes or others' (this pod holds {pod_held} bytes); no room within the probe's timeout"
)]
pub struct BudgetExhausted {
    /// The budget.
    pub limit: usize,
    /// What the probe's pod held when the deadline came.
    pub pod_held: usize,
}

impl TargetBudget {
    /// A budget of `limit` bytes, reporting what is held on `held` if given.
    pub fn new(limit: usize, held: Option<IntGauge>) -> Arc<Self> {
        let limit = limit.max(CHUNK);
        Arc::new(Self {
            limit,
            reserve: limit / 4,
            state: Mutex::new(State::default()),
            held,
        })
    }

    /// A budget with no bound (handlers run outside the daemon).
    pub fn unbounded() -> Arc<Self> {
        Self::new(usize::MAX / 2, None)
    }

    /// The budget for a prober whose memory limit is `memory_limit` (`None`: no limit).
    pub fn size_for(memory_limit: Option<u64>) -> usize {
        match memory_limit {
            None => DEFAULT_BUDGET,
            Some(m) => usize::try_from(m / LIMIT_DIVISOR)
                .unwrap_or(usize::MAX)
                .max(MIN_BUDGET),
        }
    }

    /// The budget in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now, all pods.
    pub fn used(&self) -> usize {
        self.state.lock().used
    }

    /// The most held at once since the start.
    pub fn peak(&self) -> usize {
        self.state.lock().peak
    }

    /// Bytes `pod` holds now.
    pub fn pod_held(&self, pod: &str) -> usize {
        self.state.lock().pods.get(pod).map_or(0, |p| p.held)
    }

    /// A probe's account for `pod`, holding nothing yet.
    pub fn account(self: &Arc<Self>, pod: Arc<str>) -> Account {
        Account {
            budget: self.clone(),
            pod,
            held: 0,
            is_waiting: false,
            waiting: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Takes `n` bytes for `pod` if the rule allows it now; `self_waiting`: the asking probe is
    /// one of the pod's waiting ones.
    fn try_take(&self, st: &mut State, pod: &Arc<str>, n: usize, self_waiting: bool) -> bool {
        let mine = st.pods.get(pod).copied().unwrap_or_default();
        let after = mine.held + n;
        let total = st.used + n;
        if total > self.limit {
            return false;
        }
        let active = st.pods.len() + usize::from(mine.held == 0 && mine.waiting == 0);
        let shared = self.limit - self.reserve;
        // Within the shared part each pod may hold its equal part of it. The reserve is for pods
        // none of whose other probes wait for room (a pod whose probes want more than they got
        // does not take from it), each up to its equal part of the reserve.
        let share = if total <= shared {
            shared / active
        } else if mine.waiting > usize::from(self_waiting) {
            return false;
        } else {
            self.reserve / active
        };
        if after > share.max(CHUNK) {
            return false;
        }
        st.used = total;
        st.peak = st.peak.max(total);
        st.pods.entry(pod.clone()).or_default().held = after;
        self.report(st);
        true
    }

    /// Gives back `n` bytes of `pod`'s (and its waiting mark) and wakes the waiting probes.
    fn give_back(&self, pod: &str, n: usize, was_waiting: bool) {
        if n == 0 && !was_waiting {
            return;
        }
        let waiters = {
            let mut st = self.state.lock();
            st.used -= n;
            if let Some(p) = st.pods.get_mut(pod) {
                p.held -= n;
                p.waiting -= usize::from(was_waiting);
                if p.held == 0 && p.waiting == 0 {
                    st.pods.remove(pod);
                }
            }
            self.report(&st);
            // Enough waiting probes for the room given back, oldest first (each woken one that
            // still finds no room waits again at the back); waking them all would cost a poll
            // of every waiting probe per probe that ends.
            let wake = (2 * (n / CHUNK + 1)).min(st.waiters.len());
            st.waiters.drain(..wake).collect::<Vec<_>>()
        };
        for w in waiters {
            w.wake();
        }
    }

    fn report(&self, st: &State) {
        if let Some(g) = &self.held {
            g.set(i64::try_from(st.used).unwrap_or(i64::MAX));
        }
    }
}

/// A pod's way into the budget: each connection of its probes gets an [`Account`] from it.
#[derive(Debug, Clone)]
pub struct Meter {
    budget: Arc<TargetBudget>,
    pod: Arc<str>,
}

impl Meter {
    /// Charges `pod`'s probes to `budget`.
    pub fn new(budget: &Arc<TargetBudget>, pod: &str) -> Self {
        Self {
            budget: budget.clone(),
            pod: Arc::from(pod),
        }
    }

    /// A fresh account for one connection.
    pub fn account(&self) -> Account {
        self.budget.account(self.pod.clone())
    }
}

/// What one probe holds of the budget, for one pod; given back when dropped.
#[derive(Debug)]
pub struct Account {
    budget: Arc<TargetBudget>,
    pod: Arc<str>,
    held: usize,
    /// This probe is counted among its pod's waiting ones.
    is_waiting: bool,
    waiting: Arc<AtomicBool>,
}

impl Account {
    /// Takes `n` more bytes, or registers `cx` to be woken when some are given back.
    pub fn poll_take(&mut self, n: usize, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.budget.state.lock();
        if self.budget.try_take(&mut st, &self.pod, n, self.is_waiting) {
            if self.is_waiting {
                self.is_waiting = false;
                if let Some(p) = st.pods.get_mut(&self.pod) {
                    p.waiting -= 1;
                }
            }
            drop(st);
            self.held += n;
            self.waiting.store(false, Ordering::Relaxed);
            return Poll::Ready(());
        }
        st.waiters.push_back(cx.waker().clone());
        if !self.is_waiting {
            self.is_waiting = true;
            st.pods.entry(self.pod.clone()).or_default().waiting += 1;
        }
        self.waiting.store(true, Ordering::Relaxed);
        Poll::Pending
    }

    /// Bytes this probe holds.
    pub fn held(&self) -> usize {
        self.held
    }

    /// A flag that is set while this probe waits for room (read it after a deadline).
    pub fn waiting(&self) -> Waiting {
        Waiting(self.waiting.clone())
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        self.budget.give_back(&self.pod, self.held, self.is_waiting);
    }
}

/// Whether a probe's stream was waiting for room.
#[derive(Debug, Clone)]
pub struct Waiting(Arc<AtomicBool>);

impl Waiting {
    /// The budget's failure (through `meter`, the probe's) if the probe was waiting for room.
    pub fn exhausted(&self, meter: &Meter) -> Option<BudgetExhausted> {
        self.0.load(Ordering::Relaxed).then(|| BudgetExhausted {
            limit: meter.budget.limit(),
            pod_held: meter.budget.pod_held(&meter.pod),
        })
    }
}

/// A probe's connection whose reads are charged to its [`Account`] (unmetered without one).
#[derive(Debug)]
pub struct Metered<S> {
    inner: S,
    /// Boxed: the stream lives in every HTTP probe's future, which is kept small.
    account: Option<Box<Account>>,
    /// Room taken and not yet read into.
    room: usize,
}

impl<S> Metered<S> {
    /// `inner`, its reads charged to `account`.
    pub fn new(inner: S, account: Option<Account>) -> Self {
        Self {
            inner,
            account: account.map(Box::new),
            room: 0,
        }
    }

    /// The connection under the meter.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let Some(account) = &mut this.account else {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        };
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if this.room == 0 {
            std::task::ready!(account.poll_take(CHUNK, cx));
            this.room = CHUNK;
        }
        if buf.remaining() <= this.room {
            let before = buf.filled().len();
            std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
            this.room -= buf.filled().len() - before;
            return Poll::Ready(Ok(()));
        }
        // Never read more than the room taken.
        let mut bounce = [0u8; CHUNK];
        let mut part = ReadBuf::new(&mut bounce[..this.room]);
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut part))?;
        buf.put_slice(part.filled());
        this.room -= part.filled().len();
        Poll::Ready(Ok(()))
    }
}

crate::handler::write_through::write_through!(Metered);

mod memory_limit;

pub use memory_limit::memory_limit;

#[cfg(test)]
mod tests;
