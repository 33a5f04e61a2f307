//! What every podward daemon shares at its edge: layered configuration, logs, the loopback admin
//! endpoint (`/metrics`, `/healthz`, `/readyz`), the bounds of its gRPC socket, the shutdown
//! signal, the tables its one-shot commands print, the settings every daemon has
//! ([`config::Common`]), its metrics error and the shape of its start-up error ([`run::RunError`]).
//!
//! These live beside the wire contract because the three daemons must behave identically here
//! (same flags, same endpoints, same log format) and one copy cannot drift.

pub mod admin;
pub mod build_info;
pub mod config;
pub mod grpc;
pub mod metrics;
pub mod run;
pub mod signal;
pub mod stop;
pub mod table;
pub mod telemetry;
