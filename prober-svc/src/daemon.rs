//! The daemon's edge: its [`config`] (flags, environment, file), its [`cli`] (the one-shot
//! commands), the gRPC [`service`] it serves, the [`allocator`]'s settings and
//! [`run`](mod@run), which builds every part and runs it until shutdown.

pub mod allocator;
pub mod cli;
pub mod config;
pub mod run;
pub mod service;

pub use config::{Args, Config};
pub use run::{Options, Parts, RunError, run, run_with};
