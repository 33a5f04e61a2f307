//! The demo's command line.

use clap::Parser;

/// podward-demo: runs podward for real on a private node and shows what it does.
///
/// Starts a private containerd in a temporary directory, podward-shim, podward-prober and
/// podward-housekeeper against it, and a Kubernetes API server stand-in on loopback (the one the
/// e2e tests use; the prober talks to it with the node name `demo-node`). A small kubelet-like
/// loop runs the pod default/demo through the shim and restarts what the prober stops, and leaves
/// the pod default/old-job behind as an orphan for the housekeeper. Every few seconds it prints
/// the pod as the prober and `kubectl describe pod` would show it, and the housekeeper's plan;
/// lines starting with a time (`+12.3s`) say what just happened. Ctrl-C (or --seconds) stops it
/// and removes everything it created. Colour only when stdout is a terminal and NO_COLOR is unset.
/// Needs root.
#[derive(Debug, Parser)]
#[command(name = "podward-demo", version)]
pub(crate) struct Args {
    /// Stop after this many seconds of the pods running (0: run until Ctrl-C).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) seconds: u64,

    /// Let the housekeeper act (its --act): the orphan's cgroup, pod directory and log directory
    /// are removed once its grace period is over. Without it the housekeeper runs in its default
    /// dry run and only shows its plan.
    #[arg(long)]
    pub(crate) act: bool,

    /// Show the daemons' and the harness's own logs. By default only warnings and errors are
    /// shown, which should not happen: the WARN lines the demo causes on purpose (the prober's
    /// line for each kill, the housekeeper's notice that it acts) are counted at the end instead.
    #[arg(long, short)]
    pub(crate) verbose: bool,

    /// Admin endpoints on free loopback ports instead of the documented 127.0.0.1:9641-9643, so
    /// the demo can run beside other tests or a second demo.
    #[arg(long)]
    pub(crate) ephemeral_ports: bool,

    /// Seconds between two status blocks.
    #[arg(long, default_value_t = 10, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) status_every: u64,
}
