//! Host names of probes resolved on a bounded pool of their own, fair between pods.
//!
//! `getaddrinfo(3)` keeps kubelet's answers where they matter (`/etc/hosts`, then DNS with the
//! node's `resolv.conf` search list, `ndots`, timeout and attempts) but blocks its thread for as
//! long as DNS takes to answer, and may never return in time. So lookups run on at most
//! [`ResolverOptions::threads`] threads of their own, never on tokio's blocking pool that the
//! rest of the prober shares; each pod has at most [`ResolverOptions::per_pod`] lookups running,
//! and pods with lookups waiting take turns. A probe waits for its answer until its own deadline
//! and then fails with Go's "lookup <host>: i/o timeout"; the thread stays busy until
//! `getaddrinfo` returns, so a DNS blackhole holds at most the pool, never more.
//!
//! IP literals never resolve, and a name `/etc/hosts` lists is answered from the file (see
//! `hosts`) without the pool, so neither waits behind a pod's slow DNS.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::dial_error::DialError;

mod hosts;

use hosts::HostsFile;

/// The blocking lookup a pool thread runs: `host:port` to its addresses.
pub type LookupFn = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// Settings of a [`Resolver`].
#[derive(Clone)]
pub struct ResolverOptions {
    /// Root of the file system whose `etc/hosts` is read.
    pub root: PathBuf,
    /// Pool threads (lookups running at once, all pods).
    pub threads: usize,
    /// Lookups one pod may have running at once.
    pub per_pod: usize,
    /// The blocking lookup (`getaddrinfo` through std's `ToSocketAddrs` unless replaced).
    pub lookup: Arc<LookupFn>,
}

impl std::fmt::Debug for ResolverOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolverOptions")
            .field("root", &self.root)
            .field("threads", &self.threads)
            .field("per_pod", &self.per_pod)
            .finish_non_exhaustive()
    }
}

/// Pool threads by default.
pub const THREADS: usize = 8;
/// Lookups running per pod by default.
pub const PER_POD: usize = 2;

impl Default for ResolverOptions {
    fn default() -> Self {
        Self {
            root: PathBuf::from("/"),
            threads: THREADS,
            per_pod: PER_POD,
            lookup: Arc::new(getaddrinfo),
        }
    }
}

/// `getaddrinfo(3)` through std.
pub fn getaddrinfo(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

/// The probes' resolver: see the module's doc. Its threads start on first use and end when it
/// is dropped (a thread inside `getaddrinfo` ends when that returns).
#[derive(Debug)]
pub struct Resolver {
    shared: Arc<Shared>,
}

/// A lookup for one pod: what the dialer is given.
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    resolver: &'a Resolver,
    pod: &'a str,
}

impl<'a> Names<'a> {
    /// Lookups of `pod` (its UID) through `resolver`.
    pub fn new(resolver: &'a Resolver, pod: &'a str) -> Self {
        Self { resolver, pod }
    }

    /// `host`'s addresses with `port`, before `deadline` (unbounded with `None`, when the
    /// caller's own timer bounds the lookup).
    pub async fn lookup(
        self,
        host: &str,
        port: u16,
        deadline: Option<Instant>,
    ) -> Result<Vec<SocketAddr>, DialError> {
        self.resolver.lookup(self.pod, host, port, deadline).await
    }
}

struct Shared {
    hosts: HostsFile,
    threads: usize,
    per_pod: usize,
    lookup: Arc<LookupFn>,
    state: Mutex<State>,
    work: Condvar,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("threads", &self.threads)
            .field("per_pod", &self.per_pod)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// Pods with lookups waiting, or running; a pod with neither is forgotten.
    pods: HashMap<Box<str>, PodQueue>,
    /// Pods that have a lookup waiting and room to run one, each once, in turn order.
    turn: VecDeque<Box<str>>,
    spawned: usize,
    /// Threads waiting for work.
    idle: usize,
    /// Idle threads already woken for a lookup that have not yet taken the lock: each serves
    /// one lookup, so only `idle - woken` are free to wake for the next.
    woken: usize,
    running: usize,
    stopping: bool,
}

#[derive(Default)]
struct PodQueue {
    waiting: VecDeque<Job>,
    running: usize,
}

struct Job {
    host: Box<str>,
    port: u16,
    answer: oneshot::Sender<io::Result<Vec<SocketAddr>>>,
}

impl Resolver {
    /// A resolver with `opts` (no thread runs until a name needs the pool).
    pub fn new(opts: ResolverOptions) -> Self {
        Self {
            shared: Arc::new(Shared {
                hosts: HostsFile::new(&opts.root),
                threads: opts.threads.max(1),
                per_pod: opts.per_pod.max(1),
                lookup: opts.lookup,
                state: Mutex::new(State::default()),
                work: Condvar::new(),
            }),
        }
    }

    /// Lookups running on the pool now (all pods).
    pub fn running(&self) -> usize {
        self.shared.state.lock().running
    }

    /// Pool threads started (never more than [`ResolverOptions::threads`]).
    pub fn threads_started(&self) -> usize {
        self.shared.state.lock().spawned
    }

    /// `host`'s addresses with `port` for a probe of `pod`, before `deadline`: an IP literal
    /// as it is, a name `/etc/hosts` lists from the file, any other through the pool.
    pub async fn lookup(
        &self,
        pod: &str,
        host: &str,
        port: u16,
        deadline: Option<Instant>,
    ) -> Result<Vec<SocketAddr>, DialError> {
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        if let Some(ips) = self.shared.hosts.lookup(host) {
            return Ok(ips
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect());
        }
        let answer = self.submit(pod, host, port);
        let answered = match deadline {
            Some(d) => match tokio::time::timeout_at(d, answer).await {
                Ok(a) => a,
                Err(_) => return Err(DialError::LookupTimeout(host.to_owned())),
            },
            None => answer.await,
        };
        match answered {
            Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
            // A failed lookup, or a pool that stopped.
            _ => Err(DialError::Lookup {
                host: host.to_owned(),
                reason: "no such host".to_owned(),
            }),
        }
    }

    /// Queues a lookup of `pod`, starting a thread if none is idle and the pool has room.
    fn submit(
        &self,
        pod: &str,
        host: &str,
        port: u16,
    ) -> oneshot::Receiver<io::Result<Vec<SocketAddr>>> {
        let mut state = self.shared.state.lock();
        self.submit_locked(&mut state, pod, host, port)
    }

    /// [`Self::submit`] with the pool's state already held.
    fn submit_locked(
        &self,
        state: &mut State,
        pod: &str,
        host: &str,
        port: u16,
    ) -> oneshot::Receiver<io::Result<Vec<SocketAddr>>> {
        let (tx, rx) = oneshot::channel();
        let shared = &self.shared;
        let per_pod = shared.per_pod;
        let q = state.pods.entry(pod.into()).or_default();
        // Lookups whose probe gave up are dropped here, so a pod whose lookups never return
        // keeps no more queued than it has probes waiting.
        q.waiting.retain(|j| !j.answer.is_closed());
        let was_empty = q.waiting.is_empty();
        q.waiting.push_back(Job {
            host: host.into(),
            port,
            answer: tx,
        });
        if was_empty && q.running < per_pod {
            state.turn.push_back(pod.into());
        }
        if q.running + q.waiting.len() > per_pod {
            // Lookups ahead of it fill the pod's bound: this one runs on the thread of one of
            // them, when it returns.
            return rx;
        }
        if state.idle > state.woken {
            state.woken += 1;
            shared.work.notify_one();
        } else if state.spawned < shared.threads {
            let worker = shared.clone();
            let started = std::thread::Builder::new()
                .name("podward-dns".into())
                .stack_size(512 * 1024)
                .spawn(move || worker.run());
            if started.is_ok() {
                state.spawned += 1;
            } else if state.spawned == 0 {
                tracing::warn!("could not start a DNS lookup thread; lookups wait for one");
            }
        }
        rx
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        self.shared.state.lock().stopping = true;
        self.shared.work.notify_all();
    }
}

impl Shared {
    /// A pool thread: takes the next pod's oldest live lookup, in turn, until the resolver goes.
    fn run(self: Arc<Self>) {
        let mut state = self.state.lock();
        loop {
            if state.stopping {
                state.spawned -= 1;
                return;
            }
            let Some((pod, job)) = self.next(&mut state) else {
                state.idle += 1;
                self.work.wait(&mut state);
                state.idle -= 1;
                state.woken = state.woken.saturating_sub(1);
                continue;
            };
            state.running += 1;
            drop(state);
            let answer = (self.lookup)(&job.host, job.port);
            let _ = job.answer.send(answer);
            state = self.state.lock();
            state.running -= 1;
            self.finished(&mut state, pod);
        }
    }

    /// The next lookup to run, with its pod (whose running count it has taken).
    fn next(&self, state: &mut State) -> Option<(Box<str>, Job)> {
        while let Some(pod) = state.turn.pop_front() {
            let Some(q) = state.pods.get_mut(&pod) else {
                continue;
            };
            // A pod can be in the turn twice (its queue emptied by probes that gave up, then
            // refilled): its bound is checked here, and `finished` puts it back.
            if q.running >= self.per_pod {
                continue;
            }
            while let Some(job) = q.waiting.pop_front() {
                if job.answer.is_closed() {
                    continue;
                }
                q.running += 1;
                if !q.waiting.is_empty() && q.running < self.per_pod {
                    state.turn.push_back(pod.clone());
                }
                return Some((pod, job));
            }
            if q.running == 0 {
                state.pods.remove(&pod);
            }
        }
        None
    }

    /// One of `pod`'s lookups returned: the pod takes its turn again if it has more waiting.
    fn finished(&self, state: &mut State, pod: Box<str>) {
        let Some(q) = state.pods.get_mut(&pod) else {
            return;
        };
        q.running -= 1;
        if q.waiting.is_empty() {
            if q.running == 0 {
                state.pods.remove(&pod);
            }
        } else if q.running + 1 == self.per_pod {
            // It was at its bound, so out of the turn: it joins at the back.
            state.turn.push_back(pod);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A pool whose lookups of `hang.` names block until the test ends, others answer at once.
    fn pool(release: Arc<(Mutex<bool>, Condvar)>) -> Resolver {
        Resolver::new(ResolverOptions {
            root: PathBuf::from("/nonexistent"),
            threads: 8,
            per_pod: 2,
            lookup: Arc::new(move |host: &str, port| {
                if host.starts_with("hang.") {
                    let (lock, cv) = &*release;
                    let mut done = lock.lock();
                    while !*done {
                        cv.wait(&mut done);
                    }
                }
                Ok(vec![SocketAddr::new([10, 0, 0, 1].into(), port)])
            }),
        })
    }

    fn until(what: &str, cond: impl Fn() -> bool) {
        let end = std::time::Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(std::time::Instant::now() < end, "never: {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[tokio::test]
    async fn lookups_submitted_before_a_woken_thread_runs_each_get_a_thread() {
        let release = Arc::new((Mutex::new(false), Condvar::new()));
        let resolver = pool(release.clone());
        // One thread, idle after a quick lookup.
        let warm = resolver.submit("warm", "quick", 80);
        warm.await.expect("answer").expect("quick");
        until("one idle thread", || resolver.shared.state.lock().idle == 1);
        // Six pods submit while the idle thread cannot yet take the lock: one is its, the
        // other five need threads of their own.
        let answers: Vec<_> = {
            let mut state = resolver.shared.state.lock();
            (0..6)
                .map(|i| resolver.submit_locked(&mut state, &format!("pod-{i}"), "hang.x", 80))
                .collect()
        };
        until("all six running", || resolver.running() == 6);
        assert!(resolver.threads_started() <= 8);
        let (lock, cv) = &*release;
        *lock.lock() = true;
        cv.notify_all();
        for a in answers {
            a.await.expect("answer").expect("released");
        }
    }

    #[tokio::test]
    async fn a_pod_at_its_bound_starts_no_thread() {
        let release = Arc::new((Mutex::new(false), Condvar::new()));
        let resolver = pool(release.clone());
        let answers: Vec<_> = (0..50)
            .map(|_| resolver.submit("hostile", "hang.y", 80))
            .collect();
        until("two running", || resolver.running() == 2);
        assert!(
            resolver.threads_started() <= 3,
            "{} threads for one pod's two lookups",
            resolver.threads_started()
        );
        let (lock, cv) = &*release;
        *lock.lock() = true;
        cv.notify_all();
        for a in answers {
            a.await.expect("answer").expect("released");
        }
    }
}
