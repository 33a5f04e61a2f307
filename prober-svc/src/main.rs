//! `podward-prober`: flags → config → logs → [`podward_prober::run`] until SIGTERM.

use anyhow::Context;
use clap::Parser;
use podward_api::daemon::{config, signal, telemetry};
use podward_prober::{Args, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg: Config = config::load(args.config.as_deref(), &args).context("configuration")?;
    telemetry::init(cfg.log_format, &cfg.log_level)?;
    podward_prober::run(cfg, signal::shutdown())
        .await
        .context("podward-prober")
}
