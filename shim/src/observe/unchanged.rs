//! Recognising a List or Status answer that says nothing new, while it is relayed.
//!
//! kubelet relists every second and the answer usually holds the same objects as the previous
//! one: such a repeat carries no news. It is recognised by a digest computed on the relay's
//! thread as each DATA part goes by (the bytes are in cache then; read again later on another
//! thread, a 4 MiB answer costs a cache-cold pass), and is then neither queued nor decoded.
//!
//! "The same" is a [`Digest`] equal to the previous answer's: one that depends neither on how the
//! bytes were split into reads nor on the order of the list items and map entries that Go wrote
//! from its maps (see `observe/digest.rs`).
//! A body with no digest (not exactly one well-formed message) is never a repeat: it is decoded,
//! tolerantly, every time.
//!
//! **Answers past one HTTP/2 frame are not kept when the previous one was a repeat.** Keeping an
//! answer for the decoder copies every DATA part of it as it is relayed (an allocation and a
//! copy per part, and a free when it turns out a repeat), on the relay's thread, for what is
//! nearly always a repeat: at many calls at once, a large share of the shim's CPU per call
//! (docs/benchmarks.md, Shim). So once the answer to a request has repeated and is at least
//! [`SPECULATE_ABOVE`] long, the next answer to it is only digested. If that answer turns out
//! changed, it cannot be decoded: it is counted (`podward_shim_answers_deferred_total`) and the
//! request is forgotten, so kubelet's next relist (a second later) is kept and decoded. Changes
//! that matter at once reach the index without a List: the mutating calls' own answers and
//! containerd's events. Status answers (a KiB or two) stay below the size and are always kept.
//!
//! **Nor read at all more often than every [`READ_INTERVAL`].** While a large answer keeps
//! repeating, the next answer to the same request within that interval of the last one read is
//! relayed unread (`podward_shim_answers_unread_total`): its digest alone costs the relay's
//! thread a pass over every byte, for a client that lists many times a second and learns
//! nothing new from most of them. kubelet relists once a second, so each of its relists is
//! still read. A change that comes meanwhile is found by the first answer read after the
//! interval (counted as deferred, as above) and decoded from the next one.
//!
//! **Forgotten whenever the index loses an entry.** "The same as the previous answer" stands
//! for "nothing the index lacks" only while the index still holds what that answer told: an
//! entry removed since (by a relist, or a List answered before the entry was in containerd's
//! store) and listed again without its pod IP would otherwise never get the IP back from the
//! Status answers that repeat the one it was first learned from. So after a removal every
//! request's next answer is decoded ([`Unchanged::follow`]); removals are rare (a pod's end),
//! and each costs one decode per distinct request.
//!
//! Digests rather than the answers themselves keep the memory to a few hundred KiB at most.

use std::time::{Duration, Instant};

use foldhash::HashMap;

use super::watched::Watched;

/// Distinct List/Status requests remembered; past it the memory starts afresh.
const ENTRIES: usize = 4096;

/// Answers at least this long — past one DATA frame of HTTP/2's default size, a List of a few
/// containers as kubelet labels them — are not kept once the previous answer to the same
/// request was a repeat. Below it the copy is one small part, and a Status answer (always
/// below it unless verbose) carries its news at once.
pub(crate) const SPECULATE_ABOVE: usize = 16 << 10;

/// While a large answer repeats, the same request's answers are read at most this often (see
/// the module docs): well under kubelet's relist period, so that every relist of its own is
/// read.
pub const READ_INTERVAL: Duration = Duration::from_millis(250);

/// How much of an answer the relay reads, decided when its request is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Digested, and its parts kept for the decoder.
    Keep,
    /// Digested only (see the module docs).
    Digest,
    /// Relayed unread (see the module docs).
    Unread,
}

/// What [`Unchanged::settle`] made of a finished call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The same content as the previous answer to the same request: nothing to decode.
    Repeat,
    /// New content, kept: to be decoded.
    News,
    /// New content that was not kept (see the module docs): the next answer is kept.
    Missed,
}

#[derive(Debug, Clone, Copy)]
struct Last {
    answer: u64,
    /// The previous answer repeated and was large: do not keep the next one.
    speculate: bool,
    /// When the last answer was read (digested and settled).
    read_at: Instant,
}

/// The last answer's digest per (method, request digest), for every connection.
pub(crate) struct Unchanged {
    last: HashMap<(Watched, u64), Last>,
    /// [`READ_INTERVAL`] unless set otherwise.
    read_interval: Duration,
    /// The index's count of removed entries the digests were taken at (see
    /// [`Unchanged::follow`]).
    removals: u64,
}

impl Default for Unchanged {
    fn default() -> Self {
        Self {
            last: HashMap::default(),
            read_interval: READ_INTERVAL,
            removals: 0,
        }
    }
}

impl std::fmt::Debug for Unchanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unchanged")
            .field("requests", &self.last.len())
            .finish_non_exhaustive()
    }
}

impl Unchanged {
    /// Reads a repeating large answer at most every `interval` instead of [`READ_INTERVAL`]
    /// (zero: every one).
    pub(crate) fn set_read_interval(&mut self, interval: Duration) {
        self.read_interval = interval;
    }

    /// Follows the index's count of removed entries: when it moved, every answer remembered
    /// is forgotten, so that each request's next answer is decoded and tells the index again
    /// what it holds.
    pub(crate) fn follow(&mut self, removals: u64) {
        if removals != self.removals {
            self.removals = removals;
            self.last.clear();
        }
    }

    /// How much of the answer to `request`, complete at `now`, to read (see the module docs).
    pub(crate) fn reading(&self, method: Watched, request: u64, now: Instant) -> Reading {
        match self.last.get(&(method, request)) {
            Some(l) if l.speculate => {
                if now.saturating_duration_since(l.read_at) < self.read_interval {
                    Reading::Unread
                } else {
                    Reading::Digest
                }
            }
            _ => Reading::Keep,
        }
    }

    /// A successful List/Status call ended at `now` with an answer of digest `answer` (None: not
    /// one well-formed message), `len` bytes long, `kept` for the decoder or not.
    pub(crate) fn settle(
        &mut self,
        method: Watched,
        request: u64,
        answer: Option<u64>,
        len: usize,
        kept: bool,
        now: Instant,
    ) -> Verdict {
        let key = (method, request);
        if let Some(answer) = answer
            && let Some(last) = self.last.get_mut(&key)
            && last.answer == answer
        {
            last.speculate = len >= SPECULATE_ABOVE;
            last.read_at = now;
            return Verdict::Repeat;
        }
        match answer {
            Some(answer) if kept => {
                if self.last.len() >= ENTRIES {
                    self.last.clear();
                }
                let last = Last {
                    answer,
                    speculate: false,
                    read_at: now,
                };
                self.last.insert(key, last);
                Verdict::News
            }
            // Not digestible, or changed but not kept: whatever comes next is news.
            _ => {
                self.last.remove(&key);
                if kept { Verdict::News } else { Verdict::Missed }
            }
        }
    }

    /// An answer [`settle`](Self::settle) called news never reached the decoder (its queue was
    /// full): the next answer to the same request is not a repeat of it.
    pub(crate) fn forget(&mut self, method: Watched, request: u64) {
        self.last.remove(&(method, request));
    }
}

#[cfg(test)]
mod tests;
