//! `podward-housekeeper`: flags → config → logs → daemon (or the one-shot `plan` command).

use anyhow::Context;
use clap::Parser;
use podward_api::daemon::{signal, telemetry};
use podward_housekeeper::cli::{Cli, Command};
use podward_housekeeper::{Config, report};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = Config::load(&cli.args).context("configuration")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    match cli.command {
        Some(Command::Plan { json, local }) => {
            // The plan goes to stdout; logs (warnings only) to stderr.
            let filter = if cli.args.log_level.is_some() {
                config.common.log_level.as_str()
            } else {
                "warn"
            };
            telemetry::init(config.common.log_format, filter).map_err(anyhow::Error::msg)?;
            warn_unknown_keys(&cli.args);
            let out = rt.block_on(report::plan_command(&config, json, local))?;
            print!("{out}");
            Ok(())
        }
        None => {
            telemetry::init(config.common.log_format, &config.common.log_level)
                .map_err(anyhow::Error::msg)?;
            warn_unknown_keys(&cli.args);
            // `shutdown()` installs the signal handlers inside the runtime, before `run` serves.
            rt.block_on(async { podward_housekeeper::run(config, signal::shutdown()).await })?;
            Ok(())
        }
    }
}

/// Says which keys of the config file this build ignored (a key of another release).
fn warn_unknown_keys(args: &podward_housekeeper::config::Args) {
    for w in podward_api::daemon::config::unknown_keys::<Config>(args.config.as_deref()) {
        tracing::warn!("{w}");
    }
}
