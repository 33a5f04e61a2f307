//! Shared fixtures of the direct-exec tests (included with `#[path]` by `exec_direct.rs`,
//! `exec_direct_attacks.rs` and `exec_direct_staging.rs`): an attacker pod that writes what it
//! saw into a host directory mounted at `/out`, the direct runner, and the host's view of the
//! processes the attacks aim at.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use podward_api::test_util::eventually;
use podward_e2e::{
    ContainerSpec, Driver, Pod, PodSpec, RestartPolicy, SecurityContext, TestNode, proc_cmdline,
};
use podward_prober::direct_exec::{DirectExec, ExecMode};
use podward_prober::handler::exec::runner::{ExecError, ExecOutput, ExecRunner};

/// A fresh node and a driver connected to its containerd.
pub(crate) async fn node_and_driver() -> (TestNode, Driver) {
    let node = TestNode::start().await.expect("node");
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    (node, driver)
}

/// One probe's exec of `cmd` through `r`.
pub(crate) async fn run(
    r: &dyn ExecRunner,
    id: &str,
    cmd: &[&str],
    timeout: Duration,
) -> Result<ExecOutput, ExecError> {
    let cmd = cmd.iter().map(|s| (*s).to_owned()).collect();
    r.exec_sync(id, cmd, timeout).await
}

/// The direct runner the prober would use, with `helper` as its helper binary.
pub(crate) fn runner(node: &TestNode, helper: PathBuf, standby: bool) -> DirectExec {
    let ch = podward_api::socket::channel(node.containerd_socket());
    DirectExec::with_standby(ExecMode::Direct, ch, helper, standby)
}

/// A pod whose container `app` runs `command` with `sec` and `env`, `out` mounted at `/out`.
pub(crate) async fn attacker_pod(
    driver: &Driver,
    node: &TestNode,
    name: &str,
    command: &[&str],
    out: &Path,
    sec: SecurityContext,
    env: &[(&str, &str)],
) -> Pod {
    let mut c = ContainerSpec::new("app", command)
        .mount(&out.to_string_lossy(), "/out")
        .security(sec);
    for (k, v) in env {
        c = c.env(k, v);
    }
    let spec = PodSpec::new(name)
        .grace_period(1)
        .restart_policy(RestartPolicy::Never)
        .container(c);
    driver.run_pod(node, spec).await.expect("run pod")
}

/// What the attacker wrote to `/out/log` so far.
pub(crate) fn log_of(out: &Path) -> String {
    std::fs::read_to_string(out.join("log")).unwrap_or_default()
}

/// The lines of `log` that start with one of `words`.
pub(crate) fn lines_with(log: &str, words: &[&str]) -> Vec<String> {
    log.lines()
        .filter(|l| words.iter().any(|w| l.starts_with(&format!("{w} "))))
        .map(str::to_owned)
        .collect()
}

/// Waits for the attacker's `/out/ready`.
pub(crate) async fn wait_ready(out: &Path) {
    eventually(
        "the attacker to be ready",
        Duration::from_secs(60),
        async || out.join("ready").exists(),
    )
    .await;
}

/// PIDs of host processes whose command line contains `marker`.
pub(crate) fn running(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| proc_cmdline(*p).contains(marker))
        .collect()
}

/// The host PID of the one process whose command line is exactly `cmdline`, once it runs (a
/// script that marks itself ready and then `exec`s it may not have got there yet).
pub(crate) async fn pid_of(cmdline: &str) -> i32 {
    let exactly = || -> Vec<i32> {
        running(cmdline)
            .into_iter()
            .filter(|p| proc_cmdline(*p) == cmdline)
            .collect()
    };
    let what = format!("one process to run {cmdline:?}");
    eventually(&what, Duration::from_secs(10), async || {
        exactly().len() == 1
    })
    .await;
    exactly()[0]
}
