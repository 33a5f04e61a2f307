//! `podward-prober`: flags → config → logs → [`podward_prober::run`] until SIGTERM.

use anyhow::Context;
use clap::Parser;
use podward_api::daemon::{config, signal, telemetry};
use podward_prober::handler::exec::direct::init::HELPER_ARG;
use podward_prober::{Args, Config};

fn main() -> anyhow::Result<()> {
    // The direct-exec helper is this binary re-executed: it must stay single-threaded, so it
    // branches off before the runtime starts.
    if std::env::args_os().nth(1).as_deref() == Some(HELPER_ARG.as_ref()) {
        podward_prober::handler::exec::direct::init::main();
    }
    tokio::runtime::Runtime::new()
        .context("tokio runtime")?
        .block_on(daemon())
}

async fn daemon() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg: Config = config::load(args.config.as_deref(), &args).context("configuration")?;
    telemetry::init(cfg.log_format, &cfg.log_level)?;
    podward_prober::run(cfg, signal::shutdown())
        .await
        .context("podward-prober")
}
