//! Logs: `tracing` to stderr, as text for a terminal or JSON for a log pipeline.

use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. `filter` uses `RUST_LOG` syntax (e.g. `info,podward_shim=debug`).
/// Returns an error message if the filter does not parse (the caller decides how to exit).
pub fn init(format: LogFormat, filter: &str) -> Result<(), String> {
    let filter =
        EnvFilter::try_new(filter).map_err(|e| format!("invalid log filter {filter:?}: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let res = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    res.map_err(|e| format!("cannot install log subscriber: {e}"))
}
