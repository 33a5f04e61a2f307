//! Consequences: what a liveness or startup failure at threshold does to the container. [`kill`]
//! owns the whole kill (once per container ID, grace, message, record, event), running the
//! container's [`prestop`] hook first, then stopping it through the [`crate::stopper`] seam.

pub mod kill;
pub mod prestop;
