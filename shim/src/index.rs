//! The lifecycle index: every sandbox and container the shim knows of, as `podward.shim.v1`
//! messages, and the ordered changes that observations make to it.
//!
//! The index is a pure state machine: [`Index::apply`] folds one [`Observation`] in and returns
//! the changes it made, in order. It does no I/O and reads no clock (every time comes in the
//! observation), so it is tested without containerd. Sequence numbers are assigned by the
//! publisher, which holds the index behind its lock.
//!
//! From the bottom up: `packed.rs` (the tables, each entry in its protobuf encoding),
//! `convert.rs` (CRI messages to entries), `observation.rs` (what goes in and comes out),
//! `entries.rs` (the [`Index`] itself, with the abandoned calls it remembers); then the
//! three ways it changes, `lists.rs` (List and Status answers, rebuilds), `cri_calls.rs`
//! (kubelet's mutating calls) and `runtime_events.rs` (containerd's events); and `apply.rs`,
//! which hands each observation to them.

mod apply;
mod convert;
mod cri_calls;
mod entries;
mod lists;
mod observation;
mod packed;
mod runtime_events;
#[cfg(test)]
mod tests;

pub(crate) use entries::Abandoned;
pub use entries::Index;
pub use observation::{Change, Observation};
