//! What the prober tells the world: an [`event`] for each thing that happened to a probe, the
//! [`hub`] that fans events out to the `Watch` subscribers, and the [`wire`] conversions of the
//! prober's types to `podward.prober.v1`.

pub mod event;
pub mod hub;
pub mod wire;
