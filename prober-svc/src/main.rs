//! `podward-prober`: flags → config → logs → [`podward_prober::run`] until SIGTERM.

use anyhow::Context;
use clap::Parser;
use podward_api::daemon::{config, signal, telemetry};
use podward_prober::{Args, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut cfg: Config = config::load(args.config.as_deref(), &args).context("configuration")?;
    // The downward API's usual variable, when neither the flag, PODWARD_PROBER_NODE_NAME nor
    // the config file names the node.
    if cfg.node_name.is_none() {
        cfg.node_name = std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty());
    }
    telemetry::init(cfg.log_format, &cfg.log_level)?;
    podward_prober::run(cfg, signal::shutdown())
        .await
        .context("podward-prober")
}
