//! The decision layer: from one pass's reads to a plan, changing nothing.
//!
//! [`orphan`] folds the runtime's answer into the per-UID absence history (the orphan rule);
//! [`assess`] has the orphans' pod dirs walked off the async runtime; [`container_gc`] and
//! [`sandbox`] find exited containers beyond kubelet's GC policy and leaked sandboxes; [`plan`]
//! builds the sorted plan with reasons and evidence; [`uid_gate`] says which UIDs may be acted
//! on now (one action per UID at a time, per-UID backoff). It reads what [`crate::sources`]
//! read and asks [`crate::node`] only questions (is this mounted, may this dir be removed).

pub mod assess;
pub mod container_gc;
pub mod orphan;
pub mod plan;
pub mod sandbox;
pub mod uid_gate;
