//! Observation of the watched CRI methods: the CRI calls read from each connection's HTTP/2
//! streams (`connection.rs`, `calls.rs`), which paths are watched (`watched.rs`), the raw bytes
//! kept for them (`raw.rs`), and decoding those bytes (off the relay path, in one thread:
//! `observer.rs`, `decode.rs`) into [`Observation`](crate::index::Observation)s for the index.
//!
//! Only the lifecycle calls in [`Watched`] are ever decoded. Everything else (PullImage with its
//! registry credentials, Exec, unknown methods) is relayed without a copy.

mod calls;
mod connection;
mod decode;
mod digest;
mod grpc_headers;
mod observer;
mod raw;
mod recorder;
mod stream;
mod unchanged;
mod watched;

/// How often a repeating large List/Status answer is read at most, per request, by default.
pub use unchanged::READ_INTERVAL as REPEAT_READ_INTERVAL;

pub use connection::{Conversation, SideReader};
pub use decode::decode;
pub use observer::{Observer, QUEUE_BYTES, QUEUE_LEN, spawn};
pub use raw::{Body, Outcome, Raw};
pub use recorder::Recorder;
pub use watched::Watched;
