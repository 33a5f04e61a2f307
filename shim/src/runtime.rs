//! What the shim learns from containerd directly, beside the calls it relays: whether containerd
//! is up ([`upstream`]), its own events ([`events`]), the whole index read from it at start and
//! after every reconnect ([`rebuild`]), and the relists that heal the index while observation of
//! the relayed calls is lost ([`heal`]).
//!
//! From the bottom up: `upstream.rs` and `events.rs` stand alone, `heal.rs` reads through
//! `rebuild.rs` (and its `rebuild/reader.rs`).

pub mod events;
pub mod heal;
pub mod rebuild;
pub mod upstream;
