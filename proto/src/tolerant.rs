//! Decoding CRI messages so that one invalid string costs that string, never the whole message.
//!
//! CRI's `string` fields reach us from containerd unvalidated: Go's protobuf runtimes in
//! containerd 1.6/1.7 do not check UTF-8, so a `RunPodSandbox` carrying `"\xff"` in an annotation
//! value is stored, and every later `ListPodSandbox` carries it. prost rejects a `string` field
//! that is not UTF-8 and fails the *whole* message, so a strict decode of that List hides every
//! sandbox of the node from a daemon. [`decode`] instead:
//!
//! 1. decodes strictly (the fast path: every well-formed message, in place, no copy);
//! 2. only if that fails, splits the message's top-level fields on the wire, and tests each one
//!    alone with prost (a fresh message holding only that field). A field that fails is
//!    repaired: its bytes are walked as protobuf, and every length-delimited value inside that
//!    is not valid UTF-8 and cannot itself be walked as protobuf is taken for a string and
//!    replaced with [`String::from_utf8_lossy`] (U+FFFD for each invalid sequence, what Go's
//!    `encoding/json` and kubelet's logs show for such bytes). If prost accepts the repaired
//!    field, it is kept ([`Action::Replaced`]); otherwise that field alone is left out
//!    ([`Action::Dropped`]) — for a List, that is one object;
//! 3. decodes the reassembled message strictly.
//!
//! Why by hand on the wire rather than with a schema (`prost-reflect` and a descriptor of CRI's
//! `api.proto`): the `k8s-cri` crate ships the generated types but no descriptor, so a schema
//! would be a second copy of CRI to keep in step with the first. prost itself is the judge of
//! each field here, with the types we already use, so what a strict decode accepts is exactly
//! what this accepts; the walk only needs the wire format's four field kinds. The one guess is
//! a value that is both invalid UTF-8 and walkable as protobuf: it is taken for a message, and if
//! it was a string its top-level field ends up dropped — reported, never silent.

mod codec;
mod decode;
pub mod runtime;

pub use codec::TolerantCodec;
pub use decode::{Action, Decoded, Repair, decode};
