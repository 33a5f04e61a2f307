//! `podward-demo`: all of podward running for real on a private node — a containerd the demo
//! starts in a temporary directory, the three daemons against it, the project's Kubernetes API
//! server stand-in, and two pods run by a small kubelet-like loop through the shim. It prints
//! what a person would look at (the prober's view, what `kubectl describe pod` would show, the
//! housekeeper's plan) until Ctrl-C or `--seconds`, then removes everything it created.
//!
//! - `default/demo` runs in a pod cgroup where kubelet puts it, is known to the API server with
//!   the `podward.io/ready` readiness gate, and has two containers: `web` (busybox `httpd`, whose
//!   readiness file comes and goes, so the gate condition goes False and back to True) and
//!   `flaky` (healthy for 10 s, then its exec liveness probe fails: the prober runs its preStop
//!   hook and stops it, and the driver, acting as kubelet, restarts it — again and again).
//! - `default/old-job` is left behind as kubelet leaves a pod it could not clean up: removed from
//!   the runtime, its pod cgroup, pod directory and log directory still there. The housekeeper
//!   plans its removal (dry run), or removes it with `--act`.

mod args;
mod scenario;
mod stack;
mod term;
mod view;

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use tokio::time::Instant;

use crate::args::Args;
use crate::term::Style;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let style = Style::detect();
    term::init_logging(args.verbose);

    println!(
        "{}",
        style.bold("== starting containerd in a temporary root (images are built on first use)")
    );
    let mut stack = stack::Stack::start(&args, &style).await?;
    println!(
        "   node directory {}, cgroup root {} (kubelet's --cgroup-root; cgroupfs driver, pods under {}/kubepods)",
        stack.node.dir().display(),
        stack.node.cgroup_parent(),
        stack.node.cgroup_parent(),
    );
    let result = run(&args, &style, &stack).await;
    println!("{}", style.bold("== cleaning up"));
    stack.stop_watchers().await;
    let result = match result {
        Ok(pod) => pod
            .delete()
            .await
            .context("delete the demo pod (kubelet's way)"),
        Err(e) => Err(e),
    };
    let (warnings, kills) = stack.stop().await;
    println!(
        "   daemon warnings and errors during the run: {warnings}{}; expected WARN lines apart \
         from those (the prober logs each kill shown above, the housekeeper says when it acts): {kills}",
        if warnings == 0 { "" } else { " (shown above)" }
    );
    result
}

/// The pods, then the status loop until Ctrl-C or `--seconds`; the demo pod, for the cleanup to
/// delete.
async fn run(args: &Args, style: &Style, stack: &stack::Stack) -> Result<podward_e2e::Pod> {
    let orphan = scenario::leave_orphan(stack).await?;
    println!(
        "{} pod default/old-job (uid {}) was deleted from the runtime, but what kubelet cleans up \
         after it is still there (as when kubelet restarts mid-cleanup):\n   cgroup   {}\n   pod dir  {}\n   log dir  {}",
        style.bold("== left an orphan:"),
        orphan.uid,
        orphan.cgroup.display(),
        orphan.pod_dir.display(),
        orphan.log_dir.display(),
    );
    let pod = scenario::run_demo_pod(stack).await?;
    println!(
        "{} default/demo (uid {}) in cgroup {}, through the shim ({}), registered in the API server \
         with the readiness gate podward.io/ready\n   web: HTTP liveness /healthz and readiness /ready; \
         its ready file goes away after 8 s for 6 s, every 14 s\n   flaky: exec liveness `cat /tmp/healthy`, \
         failing after 10 s; its preStop hook touches {}",
        style.bold("== running pod"),
        pod.pod.uid(),
        scenario::cgroup_of(stack, pod.pod.spec()).display(),
        stack.paths.cri_sock.display(),
        pod.hook_file.display(),
    );
    let mut observer = view::Observer::new(stack, &pod, &orphan, style.clone());
    let started = observer.started;
    let end = (args.seconds > 0).then(|| started + Duration::from_secs(args.seconds));
    let every = Duration::from_secs(args.status_every);
    let mut next_block = started + every;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => break,
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        for line in observer.changes().await {
            println!("{line}");
        }
        if end.is_some_and(|e| Instant::now() >= e) {
            break;
        }
        if Instant::now() >= next_block {
            next_block += every;
            print!("{}", observer.block().await);
        }
    }
    print!("{}", observer.block().await);
    println!("{}", observer.outcome(args.act));
    drop(observer);
    Ok(pod.pod)
}
