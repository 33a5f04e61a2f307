//! The pods the prober follows: the [`pod_table`] that owns them and their workers, the
//! [`manager`] that brings the workers to what each pod's annotation asks for, and the [`view`]
//! that reads the table and the workers' results for the readiness gate and `Status`.

pub mod manager;
pub mod pod_table;
pub mod view;
