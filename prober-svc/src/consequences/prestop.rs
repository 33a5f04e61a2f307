//! The container's preStop hook, run before a probe-triggered stop the way kubelet's
//! `killContainer` runs it (`kuberuntime_container.go`, `executePreStopHook`): the hook gets at
//! most the grace period, and the grace left after it is what `StopContainer` gets (never less
//! than kubelet's 2 s). Without this a liveness kill looks like a crash to the application.
//!
//! The hooks come from the pod spec, so only with the Kubernetes API's view of the pod
//! ([`crate::model::api_pod::ApiPod`]); exec hooks run through the exec probes' runner, HTTP hooks
//! through the HTTP probe's client, `sleep` sleeps.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::handler::attempt::{Answer, ProbeTarget};
use crate::handler::exec::runner::{ExecError, ExecRunner};
use crate::handler::host_policy::{HostPolicy, NodePolicy};
use crate::handler::http::{HttpProber, SCHEME_MISMATCH, authority};
use crate::handler::resolve::{Names, Resolver, ResolverOptions};
use crate::model::api_pod::Hook;
use crate::model::{ContainerInfo, PodInfo};
use crate::spec::{HttpGetSpec, HttpScheme};

/// The start of the HTTP probe client's output for an answered status outside 200–399
/// (kubelet's "HTTP probe failed with statuscode: N").
const ANSWERED_STATUS: &str = "HTTP probe failed with statuscode: ";

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
    /// The HTTP request failed (an answered status, whatever it is, is no failure).
    #[error("http lifecycle hook failed: {0}")]
    Http(String),
    /// The pod has no address to send the HTTP hook to.
    #[error("no pod IP for the http lifecycle hook")]
    NoAddress,
    /// The hook cannot be run (kubelet refuses `tcpSocket` and invalid handlers alike).
    #[error("{0}")]
    Invalid(String),
}

/// How a hook that ran was delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookRan {
    /// As the spec has it.
    AsWritten,
    /// An HTTPS httpGet hook whose server answered the TLS handshake in plain HTTP, delivered
    /// over HTTP instead (kubelet's fallback, reported with a `LifecycleHTTPFallback` event).
    HttpFallback {
        /// The request URL's `host:port`.
        host: String,
    },
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
    ) -> BoxFuture<'a, Result<HookRan, HookError>>;
}

/// Hooks run through the probes' own exec runner and HTTP client.
pub struct Hooks {
    exec: std::sync::Arc<dyn ExecRunner>,
    http: HttpProber,
    /// `--probe-host-policy` holds for httpGet hooks too (a hook's `host` reaches the same
    /// addresses a probe's would), with the node IP that marks a hostNetwork pod.
    host_policy: NodePolicy,
    /// Where the host names of httpGet hooks resolve (the probes' resolver in the daemon).
    resolver: std::sync::Arc<Resolver>,
}

impl Hooks {
    /// Hooks over `exec` (the exec probes' runner); HTTP requests carry kubelet's lifecycle
    /// User-Agent, `kube-lifecycle/<kube_version>` (as kubelet's
    /// `NewRequestForHTTPGetAction(..., "lifecycle")`), `kube_version` being "major.minor".
    pub fn new(exec: std::sync::Arc<dyn ExecRunner>, kube_version: &str) -> Self {
        Self {
            exec,
            http: HttpProber::new(&format!("kube-lifecycle/{kube_version}")),
            host_policy: NodePolicy::ALLOW,
            resolver: std::sync::Arc::new(Resolver::new(ResolverOptions::default())),
        }
    }

    /// Resolves the host names of httpGet hooks through `resolver`, in the hook's pod's turn.
    pub fn with_resolver(mut self, resolver: std::sync::Arc<Resolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Applies `--probe-host-policy` to httpGet hooks that name a host: under `deny` such a hook
    /// fails without a request; under `deny-local` every address it dials (each redirect hop
    /// too) is checked, as a probe's are.
    pub fn with_host_policy(mut self, policy: NodePolicy) -> Self {
        self.host_policy = policy;
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
    ) -> BoxFuture<'a, Result<HookRan, HookError>> {
        Box::pin(async move {
            match hook {
                Hook::Exec { command } => {
                    let out = self.exec.exec_sync(&c.id, command.clone(), timeout).await?;
                    if out.exit_code == 0 {
                        return Ok(HookRan::AsWritten);
                    }
                    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
                    output.push_str(&String::from_utf8_lossy(&out.stderr));
                    output.truncate(crate::model::outcome::capped(&output).len());
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
                    if let (HostPolicy::Deny, Some(host)) = (self.host_policy.policy(), &get.host) {
                        return Err(HookError::Invalid(format!(
                            "{host:?}: a hook may not name a host (--probe-host-policy=deny)"
                        )));
                    }
                    let began = tokio::time::Instant::now();
                    let Err(failed) = self.get(get, timeout, &target, host_ip, &pod.uid).await
                    else {
                        return Ok(HookRan::AsWritten);
                    };
                    // kubelet's `runHTTPHandler`: a server that answered the TLS handshake in
                    // plain HTTP gets the same request over HTTP, without its `Authorization`
                    // header; if that fails too, the hook fails with the HTTPS error.
                    if !failed.ends_with(SCHEME_MISMATCH) {
                        return Err(HookError::Http(failed));
                    }
                    let plain = HttpGetSpec {
                        scheme: HttpScheme::Http,
                        headers: get
                            .headers
                            .iter()
                            .filter(|(name, _)| !name.eq_ignore_ascii_case("authorization"))
                            .cloned()
                            .collect(),
                        ..get.clone()
                    };
                    let left = timeout.saturating_sub(began.elapsed());
                    match self.get(&plain, left, &target, host_ip, &pod.uid).await {
                        Ok(()) => Ok(HookRan::HttpFallback {
                            host: authority(get, &target).unwrap_or_default(),
                        }),
                        Err(_) => Err(HookError::Http(failed)),
                    }
                }
                Hook::Sleep(d) => {
                    tokio::time::sleep((*d).min(timeout)).await;
                    Ok(HookRan::AsWritten)
                }
                Hook::Invalid(msg) => Err(HookError::Invalid(msg.clone())),
            }
        })
    }
}

impl Hooks {
    /// One delivery of httpGet hook `get`; `Err` with the request's failure (the probe client's
    /// text).
    async fn get(
        &self,
        get: &HttpGetSpec,
        timeout: Duration,
        target: &ProbeTarget<'_>,
        host_ip: std::net::IpAddr,
        pod_uid: &str,
    ) -> Result<(), String> {
        let guard = self.host_policy.guard(host_ip);
        let names = Names::new(&self.resolver, pod_uid);
        // kubelet's `runHTTPHandler` fails only when the request fails: any status the server
        // answers is a hook that ran. The probe client reports an answered error status as a
        // Failure with kubelet's probe text; every other Failure is a request that failed
        // (dial, timeout, redirects, a bad response).
        match self
            .http
            .probe(get, timeout, target, guard, None, names)
            .await
        {
            Ok(Answer::Success(_) | Answer::Warning(_)) => Ok(()),
            Ok(Answer::Failure(o)) if o.starts_with(ANSWERED_STATUS) => Ok(()),
            Ok(Answer::Failure(o)) => Err(o),
            Err(e) => Err(e.to_string()),
        }
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
mod fallback_tests;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::IpAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::AsyncWriteExt;

    use super::*;
    // Exec hooks are not what these tests are about.
    use crate::spec::{HttpGetSpec, HttpScheme, PortRef};
    use crate::test_fakes::NoExec;

    /// An HTTP server on loopback answering 200 and counting connections.
    async fn server() -> (u16, Arc<AtomicUsize>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        let seen = Arc::new(AtomicUsize::new(0));
        let n = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
        });
        (port, seen)
    }

    fn pod(ip: &str) -> (PodInfo, ContainerInfo) {
        let pod = PodInfo {
            uid: "u".into(),
            name: "p".into(),
            namespace: "ns".into(),
            sandbox_id: "s".into(),
            sandbox_created_at_ns: 0,
            ip: Some(ip.parse().expect("ip")),
            probes_annotation: None,
            stop_requested_at_ns: 0,
            containers: BTreeMap::new(),
            api: None,
        };
        let c = crate::test_fakes::running_app("c1");
        (pod, c)
    }

    fn hook_to_loopback(port: u16) -> Hook {
        Hook::HttpGet(HttpGetSpec {
            scheme: HttpScheme::Http,
            host: Some("127.0.0.1".into()),
            path: "/quit".into(),
            port: PortRef::Number(port.into()),
            headers: vec![],
        })
    }

    #[tokio::test]
    async fn an_httpget_hook_naming_a_node_local_host_obeys_the_probe_host_policy() {
        let (port, seen) = server().await;
        let hook = hook_to_loopback(port);
        let (p, c) = pod("10.1.0.5");
        let node: IpAddr = "10.255.0.1".parse().expect("ip");
        let t = Duration::from_secs(2);
        let hooks = |policy| {
            Hooks::new(Arc::new(NoExec), "1.33").with_host_policy(NodePolicy::new(policy, node))
        };

        let denied = hooks(HostPolicy::DenyLocal).run(&hook, &p, &c, t).await;
        assert!(denied.is_err(), "{denied:?}");
        let refused = hooks(HostPolicy::Deny).run(&hook, &p, &c, t).await;
        assert!(matches!(refused, Err(HookError::Invalid(_))), "{refused:?}");
        assert_eq!(
            seen.load(Ordering::SeqCst),
            0,
            "no request may reach the node"
        );

        // kubelet's behaviour, and a hostNetwork pod (probed at the node IP) under deny-local.
        let allowed = hooks(HostPolicy::Allow).run(&hook, &p, &c, t).await;
        assert!(allowed.is_ok(), "{allowed:?}");
        let (host_net, c) = pod("10.255.0.1");
        let ok = hooks(HostPolicy::DenyLocal)
            .run(&hook, &host_net, &c, t)
            .await;
        assert!(ok.is_ok(), "{ok:?}");
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }

    /// A server answering `status` once, handing the request's head back.
    async fn answering(status: u16) -> (u16, tokio::sync::oneshot::Receiver<String>) {
        use tokio::io::AsyncReadExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap_or(0);
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = s
                .write_all(
                    format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .await;
        });
        (port, rx)
    }

    #[tokio::test]
    async fn an_httpget_hook_fails_on_transport_errors_only_and_says_kube_lifecycle() {
        let (p, c) = pod("127.0.0.1");
        let t = Duration::from_secs(2);
        let hooks = Hooks::new(Arc::new(NoExec), "1.33");
        for status in [200, 404, 500] {
            let (port, head) = answering(status).await;
            let res = hooks.run(&hook_to_loopback(port), &p, &c, t).await;
            assert!(
                res.is_ok(),
                "kubelet ignores the status ({status}): {res:?}"
            );
            let head = head.await.expect("request").to_ascii_lowercase();
            assert!(
                head.contains("\r\nuser-agent: kube-lifecycle/1.33\r\n"),
                "{head}"
            );
        }
        // Nothing listens: a transport error fails the hook.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let res = hooks.run(&hook_to_loopback(port), &p, &c, t).await;
        assert!(matches!(res, Err(HookError::Http(_))), "{res:?}");
    }

    #[test]
    fn the_grace_left_is_whole_seconds_less_and_never_below_the_minimum() {
        assert_eq!(grace_after_hook(10, Duration::from_millis(4_900), 2), 6);
        assert_eq!(grace_after_hook(10, Duration::from_secs(9), 2), 2);
        assert_eq!(grace_after_hook(30, Duration::from_secs(31), 2), 2);
        assert_eq!(grace_after_hook(30, Duration::ZERO, 2), 30);
    }
}
