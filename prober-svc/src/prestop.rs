//! The container's preStop hook, run before a probe-triggered stop the way kubelet's
//! `killContainer` runs it (`kuberuntime_container.go`, `executePreStopHook`): the hook gets at
//! most the grace period, and the grace left after it is what `StopContainer` gets (never less
//! than kubelet's 2 s). Without this a liveness kill looks like a crash to the application.
//!
//! The hooks come from the pod spec, so only with the Kubernetes API's view of the pod
//! ([`crate::model::api::ApiPod`]); exec hooks run through the exec probes' runner, HTTP hooks
//! through the HTTP probe's client, `sleep` sleeps.

use std::net::IpAddr;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::handler::attempt::{Answer, ProbeTarget};
use crate::handler::exec::runner::{ExecError, ExecRunner};
use crate::handler::host_policy::HostPolicy;
use crate::handler::http::HttpProber;
use crate::model::api::Hook;
use crate::model::{ContainerInfo, PodInfo};

/// Why a hook failed (the stop goes ahead anyway, as in kubelet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// The exec runner failed or timed out.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The command ran and exited non-zero.
    #[error("command {command:?} exited with {code}: {output}")]
    Exited {
        /// The command, its arguments joined by spaces.
        command: String,
        /// Its exit code.
        code: i32,
        /// stdout + stderr (capped).
        output: String,
    },
    /// The HTTP request failed, or was answered with an error status.
    #[error("http lifecycle hook failed: {0}")]
    Http(String),
    /// The pod has no address to send the HTTP hook to.
    #[error("no pod IP for the http lifecycle hook")]
    NoAddress,
    /// The hook cannot be run (kubelet refuses `tcpSocket` and invalid handlers alike).
    #[error("{0}")]
    Invalid(String),
}

/// Runs hooks. The real one is [`Hooks`]; tests script their own.
pub trait HookRunner: Send + Sync + 'static {
    /// Runs `hook` for container `c` of `pod`, within `timeout`.
    fn run<'a>(
        &'a self,
        hook: &'a Hook,
        pod: &'a PodInfo,
        c: &'a ContainerInfo,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), HookError>>;
}

/// Hooks run through the probes' own exec runner and HTTP client.
pub struct Hooks {
    exec: std::sync::Arc<dyn ExecRunner>,
    http: HttpProber,
    /// `--probe-host-policy` holds for httpGet hooks too (a hook's `host` reaches the same
    /// addresses a probe's would), with the node IP that marks a hostNetwork pod.
    host_policy: HostPolicy,
    node_ip: Option<IpAddr>,
}

impl Hooks {
    /// Hooks over `exec` (the exec probes' runner); HTTP requests carry `user_agent`, as probes.
    pub fn new(exec: std::sync::Arc<dyn ExecRunner>, user_agent: &str) -> Self {
        Self {
            exec,
            http: HttpProber::new(user_agent),
            host_policy: HostPolicy::Allow,
            node_ip: None,
        }
    }

    /// Applies `--probe-host-policy` to httpGet hooks that name a host: under `deny` such a hook
    /// fails without a request; under `deny-local` every address it dials (each redirect hop
    /// too) is checked, as a probe's are.
    pub fn with_host_policy(mut self, policy: HostPolicy, node_ip: IpAddr) -> Self {
        self.host_policy = policy;
        self.node_ip = Some(node_ip);
        self
    }
}

impl HookRunner for Hooks {
    fn run<'a>(
        &'a self,
        hook: &'a Hook,
        pod: &'a PodInfo,
        c: &'a ContainerInfo,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            match hook {
                Hook::Exec { command } => {
                    let out = self.exec.exec_sync(&c.id, command.clone(), timeout).await?;
                    if out.exit_code == 0 {
                        return Ok(());
                    }
                    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
                    output.push_str(&String::from_utf8_lossy(&out.stderr));
                    output.truncate(crate::handler::output::capped(&output).len());
                    Err(HookError::Exited {
                        command: command.join(" "),
                        code: out.exit_code,
                        output,
                    })
                }
                Hook::HttpGet(get) => {
                    let host_ip = pod.ip.ok_or(HookError::NoAddress)?;
                    let target = ProbeTarget {
                        host_ip,
                        container_id: &c.id,
                        ports: &c.ports,
                        env: &c.env,
                    };
                    if let (HostPolicy::Deny, Some(host)) = (self.host_policy, &get.host) {
                        return Err(HookError::Invalid(format!(
                            "{host:?}: a hook may not name a host (--probe-host-policy=deny)"
                        )));
                    }
                    let guard = self.host_policy.guard(self.node_ip == Some(host_ip));
                    match self.http.probe(get, timeout, &target, guard).await {
                        Ok(Answer::Success(_) | Answer::Warning(_)) => Ok(()),
                        Ok(Answer::Failure(o)) => Err(HookError::Http(o)),
                        Err(e) => Err(HookError::Http(e.to_string())),
                    }
                }
                Hook::Sleep(d) => {
                    tokio::time::sleep((*d).min(timeout)).await;
                    Ok(())
                }
                Hook::Invalid(msg) => Err(HookError::Invalid(msg.clone())),
            }
        })
    }
}

/// The grace `StopContainer` gets after a hook that took `elapsed` of `grace` seconds: kubelet
/// subtracts whole seconds (Go's `int64(duration.Seconds())` truncates) and never goes below
/// its `minimumGracePeriodInSeconds`.
pub fn grace_after_hook(grace: i64, elapsed: Duration, minimum: i64) -> i64 {
    let spent = i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX);
    grace.saturating_sub(spent).max(minimum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_left_is_whole_seconds_less_and_never_below_the_minimum() {
        assert_eq!(grace_after_hook(10, Duration::from_millis(4_900), 2), 6);
        assert_eq!(grace_after_hook(10, Duration::from_secs(9), 2), 2);
        assert_eq!(grace_after_hook(30, Duration::from_secs(31), 2), 2);
        assert_eq!(grace_after_hook(30, Duration::ZERO, 2), 30);
    }
}
