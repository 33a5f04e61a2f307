//! `podward-prober`: flags → config → logs → [`podward_prober::daemon::run`] until SIGTERM, or the
//! one-shot `status` command.

use anyhow::Context;
use clap::Parser;
use podward_api::daemon::{config, signal, telemetry};
use podward_prober::daemon::Config;
use podward_prober::daemon::cli::{Cli, Command, lease_section, status_command};
use podward_prober::direct_exec::init::HELPER_ARG;

fn main() -> anyhow::Result<()> {
    // The direct-exec helper is this binary re-executed: it must stay single-threaded, so it
    // branches off before the runtime starts.
    if std::env::args_os().nth(1).as_deref() == Some(HELPER_ARG.as_ref()) {
        podward_prober::direct_exec::init::main();
    }
    tokio::runtime::Runtime::new()
        .context("tokio runtime")?
        .block_on(daemon())
}

async fn daemon() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut cfg: Config =
        config::load(cli.args.config.as_deref(), &cli.args).context("configuration")?;
    match cli.command {
        Some(Command::Status { pod, json }) => {
            // The status goes to stdout, an error to stderr (and exit status 1); no logs. The
            // lease lines follow the table, even when the prober cannot be reached.
            let out = status_command(&cfg.socket, pod.as_ref(), json).await;
            if let Ok(o) = &out {
                print!("{o}");
            }
            if !json && let Some(leases) = lease_section(&cfg).await {
                let gap = if out.is_ok() { "\n" } else { "" };
                print!("{gap}{leases}");
            }
            out.map(drop).map_err(Into::into)
        }
        Some(Command::Sentinel(args)) => {
            telemetry::init(cfg.common.log_format, &cfg.common.log_level)?;
            warn_unknown_keys(cli.args.config.as_deref());
            podward_prober::kubernetes::sentinel::command::run(args, signal::shutdown())
                .await
                .context("podward-prober sentinel")
        }
        Some(Command::Admission(args)) => {
            telemetry::init(cfg.common.log_format, &cfg.common.log_level)?;
            podward_prober::kubernetes::admission::run(args, signal::shutdown())
                .await
                .context("podward-prober admission")
        }
        Some(Command::Migrate(args)) => {
            // The YAML goes to stdout (or --output), the report to stderr; no logs.
            let report = podward_prober::kubernetes::migrate::run(&args)
                .context("podward-prober migrate")?;
            for (object, outcome) in report {
                eprintln!(
                    "{object}: {}",
                    podward_prober::kubernetes::migrate::describe(&outcome)
                );
            }
            Ok(())
        }
        None => {
            // The downward API's usual variable, when neither the flag, PODWARD_PROBER_NODE_NAME
            // nor the config file names the node.
            if cfg.node_name.is_none() {
                cfg.node_name = std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty());
            }
            telemetry::init(cfg.common.log_format, &cfg.common.log_level)?;
            warn_unknown_keys(cli.args.config.as_deref());
            podward_prober::daemon::run(cfg, signal::shutdown())
                .await
                .context("podward-prober")
        }
    }
}

/// Says which keys of the config file this build ignored (a key of another release).
fn warn_unknown_keys(file: Option<&std::path::Path>) {
    for w in config::unknown_keys::<Config>(file) {
        tracing::warn!("{w}");
    }
}
