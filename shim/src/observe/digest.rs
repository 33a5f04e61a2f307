//! The digest that tells whether an answer repeats: computed on a gRPC-framed message as it is
//! relayed, in whatever parts it arrives, without holding it.
//!
//! It must not depend on how the bytes arrived or were ordered:
//! - the relay reads DATA parts whose boundaries change from one answer to the next; the digest
//!   follows the message's fields across any split, and every hash in it is fed the same bytes
//!   in the same calls whatever the split (a short payload is hashed in one call, where it lies
//!   or once gathered; a long one by XXH3's streaming form, which gives the same value however
//!   it is fed);
//! - containerd lists objects from a map, in a different order on every call, and Go writes a
//!   map's entries (labels, annotations) in any order too. So the digest descends into the
//!   messages that [`shape`] names (a List's items, a Status answer's status, and on to the
//!   messages with maps) and there sums the digests of the map entries and of the nested
//!   messages, in any order; every other field is chained in the order written (encoders write
//!   a message's fields in a fixed order), so reordered repeated fields are news.
//!
//! A body that is not exactly one well-formed uncompressed message has no digest.
//!
//! XXH3 (randomly seeded per process; twox-hash, which picks AVX2 at run time where the CPU has
//! it) rather than std's SipHash: it is fast enough to hash every answer on the relay's thread as
//! the bytes go by (docs/benchmarks.md, Shim). A collision would only skip decoding one changed
//! answer; the next change, event or rebuild repairs it.
//!
//! From the bottom up: `mix.rs`, `varint.rs` and `shape.rs` (what the digest is built from),
//! `role.rs` (what becomes of a field), `bytewise.rs` ([`Digest`] and its byte-wise path),
//! `whole.rs` (its fast path) and `digester.rs` (the seed every digest starts from).

mod bytewise;
mod digester;
mod mix;
mod role;
mod shape;
mod varint;
mod whole;

pub(crate) use bytewise::Digest;
pub(crate) use digester::Digester;

#[cfg(test)]
mod tests;
