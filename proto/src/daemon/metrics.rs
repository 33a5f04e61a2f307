//! The one error a daemon's metrics constructors return.
//!
//! Every daemon registers its collectors on the registry its caller passes; the only way that
//! fails is two collectors with one name, a programming error each daemon's unit tests catch and
//! its start-up reports.

/// A metric could not be registered (a duplicate or malformed name).
#[derive(Debug, thiserror::Error)]
#[error("cannot register metric: {0}")]
pub struct MetricsError(#[from] prometheus::Error);
