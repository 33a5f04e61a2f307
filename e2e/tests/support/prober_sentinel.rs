//! Shared fixtures of the node-lease and sentinel tests (included with `#[path]` by
//! `prober_sentinel_{expiry,election}.rs` and `prober_lease_status.rs`): the e2e API stand-in
//! ([`MockApiServer`], which serves Leases, Pods, Nodes and events as kube-apiserver does) seen as
//! a small cluster, with real node-lease renewers and real sentinels in-process, each a
//! `kube::Client` of its own over HTTP that names itself in its `User-Agent`, so a test tells who
//! wrote what. No containerd: only the Kubernetes side is in question here.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderValue, header};
use podward_e2e::apiserver::{MockApiServer, Recorded};
use podward_prober::clock::Clock;
use podward_prober::kubernetes::gate::KubeWriter;
use podward_prober::kubernetes::lease::{Blind, Health, LeaseMetrics, LeaseSettings, Renewer};
use podward_prober::kubernetes::sentinel::{
    self, ElectionTiming, Marker, Rates, SentinelEvents, SentinelMetrics, SentinelSettings,
};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A status write the stand-in answered.
#[derive(Debug, Clone)]
pub struct Write {
    pub pod: String,
    pub condition: Value,
    /// The writing client's name ([`Cluster::client_named`]).
    pub who: String,
    pub at: SystemTime,
    pub field_manager: String,
    pub code: u16,
}

/// The API stand-in and what the tests read of it. Pods live in namespace `shop` with UID
/// `uid-<name>`; leases in `podward`.
pub struct Cluster {
    api: MockApiServer,
}

impl Cluster {
    pub async fn new() -> Self {
        Self {
            api: MockApiServer::start().await.expect("the API stand-in"),
        }
    }

    /// A client of this stand-in.
    pub fn client(&self) -> kube::Client {
        self.client_named("")
    }

    /// A client of this stand-in whose requests are recorded under `who` (its `User-Agent`).
    /// kube-rs's retries are off, as the prober's own clients have them.
    pub fn client_named(&self, who: &str) -> kube::Client {
        let mut config = kube::Config::new(self.api.url().parse().expect("the stand-in's URL"));
        config.default_retry = false;
        if !who.is_empty() {
            config.headers.push((
                header::USER_AGENT,
                HeaderValue::from_str(who).expect("a client name"),
            ));
        }
        kube::Client::try_from(config).expect("client")
    }

    /// Adds a pod on `node` (gated or not) with the condition status given, if any; its UID.
    pub fn add_pod(&self, name: &str, node: &str, gated: bool, condition: Option<&str>) -> String {
        let uid = format!("uid-{name}");
        let mut p = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "uid": uid},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        });
        if gated {
            p["spec"]["readinessGates"] = json!([{"conditionType": "podward.io/ready"}]);
        }
        if let Some(st) = condition {
            p["status"]["conditions"]
                .as_array_mut()
                .expect("conditions")
                .push(json!({"type": "podward.io/ready", "status": st,
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}));
        }
        self.api.put_pod(p);
        uid
    }

    /// Adds Node `name` in `zone` (its `topology.kubernetes.io/zone` label).
    pub fn add_node(&self, name: &str, zone: &str) {
        self.api.put_node(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}}));
    }

    /// Refuses every status write of pod `shop/name` with `code` and `message`.
    pub fn refuse_status_writes(&self, name: &str, code: u16, message: &str) {
        self.api.refuse_status_writes("shop", name, code, message);
    }

    /// Holds the requests of client `who` to paths containing `path` unanswered.
    pub fn stall(&self, who: &str, path: &str) {
        self.api.stall(who, path);
    }

    /// Answers what was stalled.
    pub fn unstall(&self) {
        self.api.unstall();
    }

    /// Deletes Node `name` (the stand-in's garbage collector deletes the leases it owns).
    pub fn delete_node(&self, name: &str) {
        self.api.delete_node(name);
    }

    /// Pod `name`'s `podward.io/ready` condition.
    pub fn condition(&self, name: &str) -> Option<Value> {
        let pod = self.api.pod(&format!("uid-{name}"))?;
        pod["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "podward.io/ready")
            .cloned()
    }

    /// Lease `name` of namespace `podward`.
    pub fn lease(&self, name: &str) -> Option<Value> {
        self.api.lease("podward", name)
    }

    /// Every request answered so far.
    fn answered(&self) -> impl Iterator<Item = (Recorded, u16)> {
        self.api
            .requests()
            .into_iter()
            .filter_map(|r| r.code.map(|c| (r, c)))
    }

    /// Status writes answered so far.
    pub fn status_writes(&self) -> Vec<Write> {
        self.answered()
            .filter(|(r, _)| r.method == "PATCH" && r.path.ends_with("/status"))
            .map(|(r, code)| Write {
                pod: r.path.rsplit('/').nth(1).unwrap_or("").to_owned(),
                condition: r.body["status"]["conditions"][0].clone(),
                who: r.user_agent,
                at: r.at,
                field_manager: r.query.get("fieldManager").cloned().unwrap_or_default(),
                code,
            })
            .collect()
    }

    /// Node lists of pods so far: the node of each `fieldSelector=spec.nodeName=` list.
    pub fn node_lists(&self) -> Vec<String> {
        self.api
            .requests()
            .into_iter()
            .filter(|r| r.method == "GET" && r.path == "/api/v1/pods")
            .filter_map(|r| {
                r.query
                    .get("fieldSelector")
                    .and_then(|f| f.strip_prefix("spec.nodeName="))
                    .map(str::to_owned)
            })
            .collect()
    }

    /// Events recorded so far.
    pub fn events(&self) -> Vec<Value> {
        self.api.events()
    }
}

/// Polls `f` every 50 ms until it is true or `within` passed; false then.
pub async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub const LEASE: Duration = Duration::from_secs(2);
pub const RENEW: Duration = Duration::from_millis(300);
pub const PERIOD: Duration = Duration::from_millis(200);

pub struct Healthy;

impl Health for Healthy {
    fn check(&self) -> Result<(), Blind> {
        Ok(())
    }
}

/// A node's prober renewing its lease (only the renewer: the rest is not in question here);
/// its Node is added (without a zone) unless the test added it.
pub fn prober(cluster: &Cluster, node: &str) -> JoinHandle<()> {
    if cluster.api.node(node).is_none() {
        cluster
            .api
            .put_node(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}));
    }
    ghost_prober(cluster, node)
}

/// A prober renewing the lease of `node`, which has no Node (one an autoscaler deleted).
pub fn ghost_prober(cluster: &Cluster, node: &str) -> JoinHandle<()> {
    let renewer = Renewer::new(
        cluster.client_named(&format!("prober-{node}")),
        LeaseSettings {
            namespace: "podward".into(),
            node: node.into(),
            renew_interval: RENEW,
            duration: LEASE,
            handover: None,
        },
        Clock::system(),
        LeaseMetrics::new(None).expect("metrics"),
    );
    tokio::spawn(async move { renewer.run(&Healthy, std::future::pending()).await })
}

pub fn settings(identity: &str, rates: Rates) -> SentinelSettings {
    SentinelSettings {
        namespace: "podward".into(),
        identity: identity.into(),
        election_lease: "podward-sentinel".into(),
        election: ElectionTiming {
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(200),
        },
        period: PERIOD,
        rates,
        gate_condition: "podward.io/ready".into(),
    }
}

/// A sentinel replica; dropping (aborting) its task is SIGKILL.
pub fn start_sentinel(
    cluster: &Cluster,
    identity: &str,
    rates: Rates,
) -> (JoinHandle<()>, SentinelMetrics) {
    let client = cluster.client_named(identity);
    let clock = Clock::system();
    let events = SentinelEvents::spawn(client.clone(), identity, clock);
    let marker = Marker::new(
        client.clone(),
        Arc::new(KubeWriter::new(client.clone())),
        events,
        "podward.io/ready",
        clock,
    );
    let metrics = SentinelMetrics::new(None).expect("metrics");
    let run = sentinel::run(
        client.clone(),
        client,
        marker,
        settings(identity, rates),
        metrics.clone(),
        clock,
        std::future::pending(),
    );
    let task = tokio::spawn(async move {
        let _ = run.await;
    });
    (task, metrics)
}

pub fn fast() -> Rates {
    Rates {
        normal: 10.0,
        ..Rates::default()
    }
}
