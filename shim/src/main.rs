//! `podward-shim`: parse flags, load config, start logs, run until SIGTERM.

use anyhow::Context;
use clap::Parser;
use podward_shim::config::{Args, Config};

// One thread: the shim is I/O-bound, and on small nodes every extra worker competes with
// containerd for CPU. Measured (docs/benchmarks.md): better p99 and throughput, lower RSS than
// the multi-threaded runtime.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = Config::load(&args).context("loading configuration")?;
    podward_api::daemon::telemetry::init(config.common.log_format, &config.common.log_level)
        .map_err(anyhow::Error::msg)?;
    for w in podward_api::daemon::config::unknown_keys::<Config>(args.config.as_deref()) {
        tracing::warn!("{w}");
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        ?config,
        "podward-shim starting"
    );
    podward_shim::run(config, podward_api::daemon::signal::shutdown())
        .await
        .context("podward-shim failed")?;
    Ok(())
}
