//! Command line: the daemon's flags ([`Args`], defined beside the config they fill) and the
//! one-shot `status` command an operator runs to see what the running prober sees.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use clap::{Parser, Subcommand};
use podward_api::limits::API_MESSAGE_BYTES;
use podward_api::prober::v1::prober_client::ProberClient;
use podward_api::prober::v1::{StatusRequest, StatusResponse};

use crate::daemon::config::{Args, Config};
use crate::kubernetes::lease::report::{self, LeaseNames};

mod describe;
mod render;

pub use describe::render_describe;
pub use render::{render_json, render_table};

/// podward-prober: runs Kubernetes liveness, readiness and startup probes with kubelet's
/// semantics, outside the kubelet, for pods that carry a podward.io/probes annotation.
#[derive(Debug, Parser)]
#[command(name = "podward-prober", version, about, long_about = None)]
pub struct Cli {
    /// Daemon settings (`status` reads `--socket` and `--config` from them).
    #[command(flatten)]
    pub args: Args,
    /// Run a one-shot command instead of the daemon.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// One-shot commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print what the running prober sees (asks it over --socket): per probed pod, container
    /// and probe, whether the container is started, ready and live, the probe's verdict, its
    /// last result and output, its consecutive results, and the kills; then the last kill per
    /// container and the errors in podward.io/probes annotations. With a node name in the
    /// environment (NODE_NAME or PODWARD_PROBER_NODE_NAME), the table ends with this node's
    /// lease (holder, last renewal, current or expired by how long) and the sentinel's leader
    /// lease, read from the Kubernetes API (PODWARD_PROBER_KUBECONFIG, else in-cluster) —
    /// printed even when the prober cannot be reached. The leases' namespace is
    /// PODWARD_PROBER_LEASE_NAMESPACE, else POD_NAMESPACE, else podward; the leader lease's
    /// name is PODWARD_SENTINEL_ELECTION_LEASE, else podward-sentinel. The chart sets all of
    /// these in the prober's container.
    Status {
        /// Only this pod; the table is then followed by the pod as `kubectl describe pod` would
        /// show it if kubelet ran its probes (Ready, the probe lines, the events).
        #[arg(long, value_name = "NAMESPACE/NAME")]
        pod: Option<PodRef>,
        /// Print JSON (the podward.prober.v1 StatusResponse, enums by name, outputs whole)
        /// instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run the sentinel (a cluster-scoped controller, two replicas with leader election): sets
    /// the podward.io/ready condition False (reason ProberNotReporting) on the gated pods of
    /// nodes whose prober stopped renewing its node lease, rate-limited like the node lifecycle
    /// controller; never True.
    Sentinel(crate::kubernetes::sentinel::command::SentinelArgs),
    /// Run the takeover webhook (a cluster-scoped mutating admission webhook, HTTPS): on pod
    /// CREATE in opted-in namespaces (or pods), moves the containers' liveness, readiness and
    /// startup probes into the podward.io/probes annotation, adds the podward.io/ready
    /// readiness gate and the podward node label to the pod's nodeSelector, and records what
    /// moved in podward.io/probes-moved. Never refuses a pod.
    Admission(crate::kubernetes::admission::AdmissionArgs),
    /// Rewrite Kubernetes YAML offline (Pods, Deployments, StatefulSets, DaemonSets, ReplicaSets,
    /// Jobs, CronJobs, Lists; several documents): each pod template's probes move into the
    /// podward.io/probes annotation as the takeover webhook moves them (as written, no defaults),
    /// with the readiness gate and the node label; --revert puts them back. Idempotent. Reports
    /// each object on standard error.
    Migrate(crate::kubernetes::migrate::MigrateArgs),
}

/// A pod by namespace and name, as `--pod` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
}

impl FromStr for PodRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Self {
                    namespace: ns.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(format!(
                "{s:?} is not NAMESPACE/NAME (e.g. default/web-0: a pod's namespace, a slash, its name)"
            )),
        }
    }
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why `status` printed no status.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Nothing answered on the socket.
    #[error(
        "cannot reach the prober at {}: {reason} (is it running? --socket or PODWARD_PROBER_SOCKET names its API socket)",
        path.display()
    )]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The transport error and its causes.
        reason: String,
    },
    /// The prober answered with an error (or not within [`STATUS_TIMEOUT`]).
    #[error("Status: {0}")]
    Rpc(#[from] tonic::Status),
    /// `--pod` names a pod the prober does not follow.
    #[error(
        "pod {pod} is not probed here: the prober follows {followed} probed pod(s) on this node, not this one \
         (no podward.io/probes annotation, another node, or the pod is gone)"
    )]
    NotProbed {
        /// The pod asked for.
        pod: PodRef,
        /// How many pods the prober follows.
        followed: usize,
    },
    /// JSON encoding failed.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// How long `status` waits for the prober's answer: a prober too busy to answer within this
/// is itself the news.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks the prober on `socket` for its status and renders it (`json`, or the table), for `pod`
/// only when given (the table then followed by the pod as `kubectl describe` would show it if
/// kubelet ran its probes).
pub async fn status_command(
    socket: &Path,
    pod: Option<&PodRef>,
    json: bool,
) -> Result<String, StatusError> {
    let channel = podward_api::socket::connect(socket)
        .await
        .map_err(|e| StatusError::Connect {
            path: socket.to_owned(),
            reason: causes(&e),
        })?;
    let mut request = tonic::Request::new(StatusRequest::default());
    request.set_timeout(STATUS_TIMEOUT);
    // The whole node's status in one message: as large as a Lifecycle snapshot on a full node.
    let status = ProberClient::new(channel)
        .max_decoding_message_size(API_MESSAGE_BYTES)
        .status(request)
        .await?
        .into_inner();
    let status = select(status, pod)?;
    if json {
        Ok(render_json(&status)?)
    } else if pod.is_some() {
        // One pod: also as `kubectl describe` would show it if kubelet ran its probes.
        Ok(format!(
            "{}\n{}",
            render_table(&status, podward_api::time::now_ns()),
            render_describe(&status)
        ))
    } else {
        Ok(render_table(&status, podward_api::time::now_ns()))
    }
}

/// The lease lines of `status` for a prober configured as `cfg`: its node's lease and the
/// sentinel's leader lease as the API has them (`None` when the prober has no node name: it
/// keeps no lease then). Read even when the prober itself cannot be reached: that is when they
/// matter.
pub async fn lease_section(cfg: &Config) -> Option<String> {
    let node = cfg
        .node_name
        .clone()
        .or_else(|| std::env::var("NODE_NAME").ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())?;
    let namespace = crate::kubernetes::lease::lease_namespace(cfg.lease_namespace.as_deref());
    if cfg.node_lease_duration_seconds == 0 {
        return Some(format!(
            "Node lease {namespace}/{node}: off (--node-lease-duration-seconds 0): no sentinel covers this node\n"
        ));
    }
    let names = LeaseNames {
        namespace,
        node,
        election: election_lease(std::env::var(ELECTION_LEASE_ENV).ok().as_deref()),
    };
    Some(
        report::section(
            cfg.kubeconfig.as_deref(),
            &names,
            podward_api::time::now_ns(),
        )
        .await,
    )
}

/// The environment variable naming the sentinel's leader lease: the sentinel's own
/// (`--election-lease`), so that one setting in a pod names the lease for both.
pub const ELECTION_LEASE_ENV: &str = "PODWARD_SENTINEL_ELECTION_LEASE";

/// The leader lease `status` reads: `configured` (from [`ELECTION_LEASE_ENV`]) when it names
/// one, else the sentinel's default.
pub fn election_lease(configured: Option<&str>) -> String {
    configured
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .unwrap_or(crate::kubernetes::sentinel::DEFAULT_ELECTION_LEASE)
        .to_owned()
}

/// The pods of `status` named `pod` (all without one). Namespace and name can match more than
/// one UID (a pod re-created while the old one is still followed): all are kept.
pub fn select(
    mut status: StatusResponse,
    pod: Option<&PodRef>,
) -> Result<StatusResponse, StatusError> {
    let Some(want) = pod else {
        return Ok(status);
    };
    let followed = status.pods.len();
    status
        .pods
        .retain(|p| p.pod_namespace == want.namespace && p.pod_name == want.name);
    if status.pods.is_empty() {
        return Err(StatusError::NotProbed {
            pod: want.clone(),
            followed,
        });
    }
    Ok(status)
}

/// `e` and its sources, joined (a source that repeats the one before it once): tonic's
/// transport error alone says only "transport error".
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use podward_api::prober::v1::PodStatus;

    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn status_takes_the_pod_json_and_the_daemons_socket_on_either_side() {
        let cli = Cli::try_parse_from([
            "podward-prober",
            "status",
            "--pod",
            "kube-system/coredns-0",
            "--json",
            "--socket",
            "/tmp/p.sock",
        ])
        .expect("parse");
        let Some(Command::Status { pod, json }) = cli.command else {
            panic!("status: {cli:?}");
        };
        assert_eq!(
            pod,
            Some(PodRef {
                namespace: "kube-system".into(),
                name: "coredns-0".into()
            })
        );
        assert!(json);
        let c: Config = podward_api::daemon::config::load(None, &cli.args).expect("load");
        assert_eq!(c.socket, PathBuf::from("/tmp/p.sock"));
        let before = Cli::try_parse_from(["podward-prober", "--socket", "/x.sock", "status"])
            .expect("parse");
        assert_eq!(before.args.socket, Some(PathBuf::from("/x.sock")));
        // No subcommand: the daemon, with the same flags.
        let daemon =
            Cli::try_parse_from(["podward-prober", "--node-ip", "127.0.0.1"]).expect("parse");
        assert!(daemon.command.is_none());
    }

    #[test]
    fn the_leader_lease_is_the_sentinels_setting_else_its_default() {
        assert_eq!(
            election_lease(Some("edge-podward-sentinel")),
            "edge-podward-sentinel"
        );
        assert_eq!(election_lease(Some(" ")), "podward-sentinel");
        assert_eq!(election_lease(None), "podward-sentinel");
    }

    /// `status --help` names only what `status` takes: the daemon's flags other than the
    /// global ones are refused after `status`.
    #[test]
    fn status_help_names_no_flag_status_refuses() {
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("status")
            .expect("status")
            .render_long_help()
            .to_string();
        for word in help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            let Some(flag) = word.strip_prefix("--").filter(|f| !f.is_empty()) else {
                continue;
            };
            let parsed = Cli::try_parse_from(["podward-prober", "status", &format!("--{flag}=x")]);
            let refused = parsed
                .as_ref()
                .err()
                .is_some_and(|e| e.kind() == clap::error::ErrorKind::UnknownArgument);
            assert!(
                !refused,
                "status --help names --{flag}, which status refuses:\n{help}"
            );
        }
    }

    #[test]
    fn pod_must_be_namespace_slash_name() {
        for bad in ["web", "/web", "default/", "a/b/c", ""] {
            let e = bad.parse::<PodRef>().expect_err(bad);
            assert!(e.contains("NAMESPACE/NAME"), "{e}");
        }
        let e = Cli::try_parse_from(["podward-prober", "status", "--pod", "web"])
            .expect_err("no namespace");
        assert!(e.to_string().contains("NAMESPACE/NAME"), "{e}");
    }

    fn pod(ns: &str, name: &str, uid: &str) -> PodStatus {
        PodStatus {
            pod_uid: uid.into(),
            pod_name: name.into(),
            pod_namespace: ns.into(),
            ..Default::default()
        }
    }

    #[test]
    fn select_keeps_every_uid_of_the_pod_and_refuses_an_unknown_one() {
        let status = StatusResponse {
            pods: vec![
                pod("default", "web", "u1"),
                pod("other", "web", "u2"),
                pod("default", "web", "u3"),
            ],
        };
        let want: PodRef = "default/web".parse().expect("pod");
        let got = select(status.clone(), Some(&want)).expect("found");
        let uids: Vec<&str> = got.pods.iter().map(|p| p.pod_uid.as_str()).collect();
        assert_eq!(uids, ["u1", "u3"]);
        assert_eq!(select(status.clone(), None).expect("all"), status);
        let missing: PodRef = "default/db".parse().expect("pod");
        let e = select(status, Some(&missing)).expect_err("not probed");
        assert!(
            e.to_string().starts_with(
                "pod default/db is not probed here: the prober follows 3 probed pod(s)"
            ),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_absent_prober_is_named_with_the_os_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("prober.sock");
        let e = status_command(&socket, None, false)
            .await
            .expect_err("nothing listens");
        let msg = e.to_string();
        assert!(msg.contains(&*socket.to_string_lossy()), "{msg}");
        assert!(msg.contains("No such file or directory"), "{msg}");
    }
}
