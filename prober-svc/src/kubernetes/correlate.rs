//! client-go's event correlator (`tools/record/events_cache.go`, the one kubelet's recorder
//! runs), in one place: what becomes a new event, what bumps the count of an earlier one, what
//! is folded into a "(combined from similar events)" event and what the spam filter holds back.
//!
//! kube-rs's `Recorder` keys a series without the note, so a readiness failure after a liveness
//! failure, or a new status code, only bumped the first event's count and `kubectl describe pod`
//! showed the first note for the pod's lifetime. client-go's three steps, in its order:
//!
//! 1. the **aggregator**, keyed by the involved pod, the type and the reason (not the container,
//!    not the message): up to [`MAX_SIMILAR`]` - 1` distinct messages within [`SIMILAR_WINDOW`]
//!    of each other are events of their own; from the [`MAX_SIMILAR`]th on, one event keyed by
//!    the aggregate carries [`COMBINED_PREFIX`] and the latest message;
//! 2. the **logger** (dedup): an event whose key (pod, field path, type, reason, message — or the
//!    aggregate's key) was seen before is the same object with its count bumped (a PATCH of
//!    count, last timestamp and message);
//! 3. the **spam filter**, per pod (client-go's `getSpamKey`: source and involved object, no
//!    reason, no field path): a token bucket of [`SPAM_BURST`], one more per [`SPAM_REFILL`].
//!    It runs last, so a held-back repeat still counts: the next write carries the true count.
//!
//! Every cache holds at most [`CACHE_ENTRIES`] keys (client-go's LRU size) and forgets the least
//! recently used. Messages are kept as 64-bit hashes (a collision among 4096 keys is ~2^-40
//! likely and would only merge two series), so the caches stay small whatever the notes say.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use tokio::time::Instant;

/// Distinct similar messages (same pod, type, reason) that make the next one combined
/// (client-go's `defaultAggregateMaxEvents`).
pub const MAX_SIMILAR: usize = 10;
/// Similar messages further apart than this start a new count (client-go's
/// `defaultAggregateIntervalInSeconds`).
pub const SIMILAR_WINDOW: Duration = Duration::from_secs(600);
/// The prefix of the combined event's message (client-go's `EventAggregatorByReasonMessageFunc`).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";
/// Keys each cache holds (client-go's `maxLruCacheEntries`).
pub const CACHE_ENTRIES: usize = 4096;
/// Events per pod before the spam filter holds them back (client-go's `defaultSpamBurst`).
pub const SPAM_BURST: f64 = 25.0;
/// One more event per pod this often once the burst is spent (client-go's `defaultSpamQPS` of
/// 1/300).
pub const SPAM_REFILL: Duration = Duration::from_secs(300);

/// The object an event is about: a pod, narrowed to one of its containers (or a Node, for the
/// sentinel's events about a node).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Involved {
    /// `Pod`, or `Node` (cluster-scoped: its events go to namespace `default`, as client-go's).
    pub kind: &'static str,
    /// The pod's UID.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// kubelet's field path (`spec.containers{web}`).
    pub field_path: String,
}

/// One event as kubelet's recorder makes it, before correlation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// What it is about.
    pub involved: Involved,
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// The reason (`Unhealthy`...).
    pub reason: &'static str,
    /// The message, already cut to what the API keeps.
    pub message: String,
    /// When it happened, Unix ns.
    pub at_ns: i64,
}

/// What to write for a [`Note`]: a new object (`count == 1`) or the count, last timestamp and
/// message of an earlier one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Correlated {
    /// The event object's name (`<pod>.<ns hex>`, as kubelet names them).
    pub name: String,
    /// The object it is about (the first note's field path, for a combined event).
    pub involved: Involved,
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// The reason.
    pub reason: &'static str,
    /// The message a user reads.
    pub message: String,
    /// Occurrences so far (1: create).
    pub count: i32,
    /// First occurrence, Unix ns.
    pub first_ns: i64,
    /// This occurrence, Unix ns.
    pub last_ns: i64,
}

/// The correlator's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Write this.
    Write(Correlated),
    /// The spam filter holds it back (its count is kept for the next write).
    Filtered,
}

struct Observation {
    name: String,
    involved: Involved,
    count: i32,
    first_ns: i64,
}

struct Similar {
    messages: HashSet<u64>,
    last: Instant,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// client-go's `EventCorrelator` for one recorder (one source: this node's prober).
pub struct Correlator {
    similar: Lru<u64, Similar>,
    observed: Lru<u64, Observation>,
    spam: Lru<u64, Bucket>,
    last_name_ns: i64,
}

impl Default for Correlator {
    fn default() -> Self {
        Self {
            similar: Lru::new(CACHE_ENTRIES),
            observed: Lru::new(CACHE_ENTRIES),
            spam: Lru::new(CACHE_ENTRIES),
            last_name_ns: i64::MIN,
        }
    }
}

impl Correlator {
    /// What to write for `note` (client-go's `EventCorrelate`).
    // One function on purpose: the aggregator, the series logger and the spam filter in
    // `EventCorrelate`'s order, so the two read side by side.
    pub fn correlate(&mut self, note: Note) -> Verdict {
        let now = Instant::now();
        let pod = hash(&(
            &note.involved.uid,
            &note.involved.namespace,
            &note.involved.name,
        ));
        let aggregate = hash(&(pod, note.warning, note.reason));

        // The aggregator: a new record after a quiet window; the message joins it.
        let record = self.similar.get_or_insert_with(aggregate, || Similar {
            messages: HashSet::new(),
            last: now,
        });
        if now.saturating_duration_since(record.last) > SIMILAR_WINDOW {
            record.messages.clear();
        }
        record.messages.insert(hash(&note.message));
        record.last = now;
        let (key, message) = if record.messages.len() < MAX_SIMILAR {
            let key = hash(&(aggregate, &note.involved.field_path, &note.message));
            (key, note.message)
        } else {
            // client-go drops one message at random so the set never grows past the threshold.
            if let Some(any) = record.messages.iter().next().copied() {
                record.messages.remove(&any);
            }
            (aggregate, format!("{COMBINED_PREFIX}{}", note.message))
        };

        // The logger: the same key is the same object, its count bumped.
        let correlated = match self.observed.get(&key) {
            Some(seen) => {
                seen.count = seen.count.saturating_add(1);
                Correlated {
                    name: seen.name.clone(),
                    involved: seen.involved.clone(),
                    warning: note.warning,
                    reason: note.reason,
                    message,
                    count: seen.count,
                    first_ns: seen.first_ns,
                    last_ns: note.at_ns,
                }
            }
            None => {
                let name_ns = note.at_ns.max(self.last_name_ns.saturating_add(1));
                self.last_name_ns = name_ns;
                let name = format!("{}.{:x}", note.involved.name, name_ns);
                self.observed.insert(
                    key,
                    Observation {
                        name: name.clone(),
                        involved: note.involved.clone(),
                        count: 1,
                        first_ns: note.at_ns,
                    },
                );
                Correlated {
                    name,
                    involved: note.involved,
                    warning: note.warning,
                    reason: note.reason,
                    message,
                    count: 1,
                    first_ns: note.at_ns,
                    last_ns: note.at_ns,
                }
            }
        };

        // The spam filter, per pod, last.
        let per_sec = 1.0 / SPAM_REFILL.as_secs_f64();
        let bucket = self.spam.get_or_insert_with(pod, || Bucket {
            tokens: SPAM_BURST,
            at: now,
        });
        bucket.tokens = (bucket.tokens
            + now.saturating_duration_since(bucket.at).as_secs_f64() * per_sec)
            .min(SPAM_BURST);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Verdict::Write(correlated)
        } else {
            Verdict::Filtered
        }
    }
}

fn hash(v: &impl Hash) -> u64 {
    // `DefaultHasher::new()` has fixed keys: the same note hashes the same for the process's
    // lifetime, which is all these caches need.
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// A map of at most `cap` keys that forgets the least recently used one. Hand-rolled (no LRU
/// crate is in the workspace): eviction scans the map, which happens only when a new key
/// arrives at a full map of at most [`CACHE_ENTRIES`] small entries.
struct Lru<K, V> {
    map: HashMap<K, (V, u64)>,
    cap: usize,
    tick: u64,
}

impl<K: Hash + Eq + Copy, V> Lru<K, V> {
    fn new(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            cap,
            tick: 0,
        }
    }

    fn touch(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Makes room for `k` if it is new and the map is full.
    fn make_room(&mut self, k: &K) {
        if !self.map.contains_key(k)
            && self.map.len() >= self.cap
            && let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| *k)
        {
            self.map.remove(&oldest);
        }
    }

    fn get(&mut self, k: &K) -> Option<&mut V> {
        let tick = self.touch();
        self.map.get_mut(k).map(|(v, t)| {
            *t = tick;
            v
        })
    }

    fn insert(&mut self, k: K, v: V) {
        self.make_room(&k);
        let tick = self.touch();
        self.map.insert(k, (v, tick));
    }

    fn get_or_insert_with(&mut self, k: K, f: impl FnOnce() -> V) -> &mut V {
        self.make_room(&k);
        let tick = self.touch();
        let slot = self.map.entry(k).or_insert_with(|| (f(), tick));
        slot.1 = tick;
        &mut slot.0
    }
}

#[cfg(test)]
mod tests;
