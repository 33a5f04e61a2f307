//! Command line: the daemon's flags ([`Args`], defined beside the config they fill) and the
//! `plan` subcommand an operator runs to see what the housekeeper would do.

use clap::{Parser, Subcommand};

use crate::config::Args;

/// podward-housekeeper: finds what kubelet left behind on this node (orphaned pod cgroups, pod
/// and log directories, leaked sandboxes) and removes it safely, with a plan you can inspect.
#[derive(Debug, Parser)]
#[command(name = "podward-housekeeper", version, about, long_about = None)]
pub struct Cli {
    /// Daemon settings (also used by `plan --local`).
    #[command(flatten)]
    pub args: Args,
    /// Run a one-shot command instead of the daemon.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// One-shot commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the plan: what the next pass would do, and why (asks the running daemon).
    Plan {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Compute one pass in this process instead of asking the daemon. It has no history,
        /// so orphans show as WAITING; it never acts.
        #[arg(long)]
        local: bool,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::config::{Config, DriverName};

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_override_defaults_and_durations_parse() {
        let cli = Cli::try_parse_from([
            "podward-housekeeper",
            "--interval",
            "3s",
            "--dry-run",
            "--cgroup-driver",
            "systemd",
            "--walk-max-entries",
            "5000",
            "--walk-max-time",
            "500ms",
            "plan",
            "--local",
        ])
        .expect("parse");
        let c = Config::load(&cli.args).expect("load");
        assert_eq!(
            c.walk_bounds(),
            crate::node::pod_dir::WalkBounds {
                max_entries: 5000,
                max_time: std::time::Duration::from_millis(500)
            }
        );
        assert_eq!(
            Config::default().walk_bounds(),
            crate::node::pod_dir::WalkBounds::DEFAULT
        );
        assert_eq!(c.interval, std::time::Duration::from_secs(3));
        assert!(c.dry_run);
        assert_eq!(c.cgroup_driver, DriverName::Systemd);
        assert!(matches!(
            cli.command,
            Some(Command::Plan {
                local: true,
                json: false
            })
        ));
    }

    fn dry_run_of(args: &[&str]) -> Result<bool, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("podward-housekeeper").chain(args.iter().copied()))
                .map_err(|e| e.to_string())?;
        Config::load(&cli.args)
            .map(|c| c.dry_run)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn dry_run_is_the_default_and_act_or_dry_run_false_turn_it_off() {
        assert_eq!(dry_run_of(&[]), Ok(true));
        assert_eq!(dry_run_of(&["--dry-run"]), Ok(true));
        assert_eq!(dry_run_of(&["--act"]), Ok(false));
        assert_eq!(dry_run_of(&["--act=false"]), Ok(true));
        assert_eq!(dry_run_of(&["--dry-run=false"]), Ok(false));
        assert_eq!(dry_run_of(&["--act", "plan", "--local"]), Ok(false));
        assert_eq!(dry_run_of(&["--dry-run", "plan", "--local"]), Ok(true));
        let both = dry_run_of(&["--act", "--dry-run=true"]).expect_err("conflict");
        assert!(both.contains("cannot be used with"), "{both}");
        // A value needs `=`: `--dry-run false` must not quietly mean "act".
        assert!(dry_run_of(&["--dry-run", "false"]).is_err());
    }

    #[test]
    fn flags_override_the_config_files_dry_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("hk.toml");
        std::fs::write(&file, "dry_run = false\n").expect("write");
        let f = file.to_str().expect("utf-8");
        assert_eq!(dry_run_of(&["--config", f]), Ok(false), "the file acts");
        assert_eq!(dry_run_of(&["--config", f, "--dry-run"]), Ok(true));
        std::fs::write(&file, "dry_run = true\n").expect("write");
        assert_eq!(dry_run_of(&["--config", f, "--act"]), Ok(false));
    }

    #[test]
    fn bad_duration_is_rejected_at_parse_time() {
        assert!(Cli::try_parse_from(["podward-housekeeper", "--orphan-grace", "soon"]).is_err());
    }
}
