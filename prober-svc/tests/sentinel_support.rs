//! A stateful Kubernetes API stand-in for the node lease and the sentinel, behind real
//! `kube::Client`s (a tower service in place of the HTTP connection, as
//! `apiserver_support.rs`, but answering by itself): Leases (get, create, replace with the
//! resource-version check a real API server makes — a stale version is `409` "the object has
//! been modified" —, list and watch by label), Pods (list by `spec.nodeName`, paged; status
//! patches merging conditions by `type`, the UID precondition), Nodes (get: their zone label)
//! and `events.k8s.io/v1` events.
//! Every request is recorded. Several clients (two sentinels, a prober) share one stand-in.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use kube::client::Body;
use parking_lot::Mutex;
use podward_prober::clock::Clock;
use podward_prober::kubernetes::gate::KubeWriter;
use podward_prober::lease::{Blind, Health, LeaseMetrics, LeaseSettings, Renewer};
use podward_prober::sentinel::{
    self, ElectionTiming, Marker, Rates, SentinelMetrics, SentinelSettings,
};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

type RespBody = BoxBody<Bytes, io::Error>;

/// One request the stand-in answered.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The client's name ([`Cluster::client_named`]).
    pub who: String,
    pub at: Instant,
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub body: Value,
    pub code: u16,
}

/// A status write the stand-in received.
#[derive(Debug, Clone)]
pub struct Write {
    pub pod: String,
    pub condition: Value,
    pub who: String,
    pub at: Instant,
    pub field_manager: String,
    pub code: u16,
}

#[derive(Default)]
struct State {
    rv: u64,
    /// (namespace, name) → lease.
    leases: BTreeMap<(String, String), Value>,
    /// Lease watch history: (rv, line).
    lease_history: Vec<(u64, String)>,
    /// uid → pod.
    pods: BTreeMap<String, Value>,
    /// name → Node (only what the renewer reads: its zone label).
    nodes: BTreeMap<String, Value>,
    events: Vec<Value>,
    requests: Vec<Seen>,
}

/// The stand-in. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    state: Arc<Mutex<State>>,
    lease_changes: broadcast::Sender<(u64, String)>,
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn respond(code: u16, body: &Value) -> Response<RespBody> {
    Response::builder()
        .status(StatusCode::from_u16(code).expect("code"))
        .header("content-type", "application/json")
        .body(
            Full::new(Bytes::from(body.to_string()))
                .map_err(|e: Infallible| match e {})
                .boxed(),
        )
        .expect("response")
}

fn query_of(q: Option<&str>) -> BTreeMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = v
                .replace("%3D", "=")
                .replace("%2F", "/")
                .replace("%2C", ",");
            (k.to_owned(), v)
        })
        .collect()
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new()
    }
}

impl Cluster {
    pub fn new() -> Self {
        let (lease_changes, _) = broadcast::channel(4096);
        let state = State {
            rv: 100,
            ..State::default()
        };
        Self {
            state: Arc::new(Mutex::new(state)),
            lease_changes,
        }
    }

    /// A client of this stand-in.
    pub fn client(&self) -> kube::Client {
        self.client_named("")
    }

    /// A client of this stand-in whose requests are recorded under `who`.
    pub fn client_named(&self, who: &str) -> kube::Client {
        let this = self.clone();
        let who = who.to_owned();
        let svc = tower::service_fn(move |req: Request<Body>| {
            let this = this.clone();
            let who = who.clone();
            async move { Ok::<_, Infallible>(this.handle(&who, req).await) }
        });
        kube::Client::new(svc, "default")
    }

    /// Adds a pod on `node` (gated or not) with the condition status given, if any.
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
        let mut s = self.state.lock();
        s.rv += 1;
        p["metadata"]["resourceVersion"] = json!(s.rv.to_string());
        s.pods.insert(uid.clone(), p);
        uid
    }

    /// Adds Node `name` in `zone` (its `topology.kubernetes.io/zone` label).
    pub fn add_node(&self, name: &str, zone: &str) {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}});
        self.state.lock().nodes.insert(name.to_owned(), node);
    }

    /// Pod `name`'s `podward.io/ready` condition.
    pub fn condition(&self, name: &str) -> Option<Value> {
        let s = self.state.lock();
        let pod = s.pods.get(&format!("uid-{name}"))?;
        pod["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "podward.io/ready")
            .cloned()
    }

    /// Lease `name` of namespace `podward`.
    pub fn lease(&self, name: &str) -> Option<Value> {
        self.state
            .lock()
            .leases
            .get(&("podward".to_owned(), name.to_owned()))
            .cloned()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.state.lock().requests.clone()
    }

    /// Status writes so far.
    pub fn status_writes(&self) -> Vec<Write> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with("/status"))
            .map(|r| Write {
                pod: r.path.rsplit('/').nth(1).unwrap_or("").to_owned(),
                condition: r.body["status"]["conditions"][0].clone(),
                who: r.who,
                at: r.at,
                field_manager: r.query.get("fieldManager").cloned().unwrap_or_default(),
                code: r.code,
            })
            .collect()
    }

    /// Node lists of pods so far: the node of each `fieldSelector=spec.nodeName=` list.
    pub fn node_lists(&self) -> Vec<String> {
        self.requests()
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
        self.state.lock().events.clone()
    }

    fn record(&self, s: &mut State, seen: Seen) {
        s.requests.push(seen);
    }

    fn lease_changed(&self, s: &mut State, ty: &str, lease: &Value) {
        let rv = s.rv;
        let line = format!("{}\n", json!({"type": ty, "object": lease}));
        s.lease_history.push((rv, line.clone()));
        let _ = self.lease_changes.send((rv, line));
    }

    async fn handle(&self, who: &str, req: Request<Body>) -> Response<RespBody> {
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_owned();
        let query = query_of(parts.uri.query());
        let method = parts.method.to_string();
        let segs: Vec<String> = path
            .trim_matches('/')
            .split('/')
            .map(str::to_owned)
            .collect();
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        if method == "GET"
            && query.get("watch").is_some_and(|w| w == "true" || w == "1")
            && matches!(
                segs.as_slice(),
                [
                    "apis",
                    "coordination.k8s.io",
                    "v1",
                    "namespaces",
                    _,
                    "leases"
                ]
            )
        {
            let mut s = self.state.lock();
            let seen = Seen {
                who: who.to_owned(),
                at: Instant::now(),
                method,
                path,
                query: query.clone(),
                body,
                code: 200,
            };
            self.record(&mut s, seen);
            drop(s);
            return self.watch_leases(&query);
        }
        let mut s = self.state.lock();
        let (code, out) = match (method.as_str(), segs.as_slice()) {
            (
                "GET",
                [
                    "apis",
                    "coordination.k8s.io",
                    "v1",
                    "namespaces",
                    ns,
                    "leases",
                    name,
                ],
            ) => match s.leases.get(&((*ns).to_owned(), (*name).to_owned())) {
                Some(l) => (200, l.clone()),
                None => (
                    404,
                    status(
                        404,
                        "NotFound",
                        &format!("leases.coordination.k8s.io \"{name}\" not found"),
                    ),
                ),
            },
            (
                "GET",
                [
                    "apis",
                    "coordination.k8s.io",
                    "v1",
                    "namespaces",
                    _,
                    "leases",
                ],
            ) => {
                let sel = query.get("labelSelector").cloned().unwrap_or_default();
                let items: Vec<Value> = s
                    .leases
                    .values()
                    .filter(|l| sel.is_empty() || !l["metadata"]["labels"][sel.as_str()].is_null())
                    .cloned()
                    .collect();
                (
                    200,
                    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                             "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
                )
            }
            (
                "POST",
                [
                    "apis",
                    "coordination.k8s.io",
                    "v1",
                    "namespaces",
                    ns,
                    "leases",
                ],
            ) => {
                let name = body["metadata"]["name"].as_str().unwrap_or("").to_owned();
                let key = ((*ns).to_owned(), name.clone());
                if s.leases.contains_key(&key) {
                    (
                        409,
                        status(
                            409,
                            "AlreadyExists",
                            &format!("leases.coordination.k8s.io \"{name}\" already exists"),
                        ),
                    )
                } else {
                    s.rv += 1;
                    let mut l = body.clone();
                    l["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                    l["metadata"]["namespace"] = json!(ns);
                    l["metadata"]["uid"] = json!(format!("lease-{name}"));
                    s.leases.insert(key, l.clone());
                    self.lease_changed(&mut s, "ADDED", &l);
                    (201, l)
                }
            }
            (
                "PUT",
                [
                    "apis",
                    "coordination.k8s.io",
                    "v1",
                    "namespaces",
                    ns,
                    "leases",
                    name,
                ],
            ) => {
                let key = ((*ns).to_owned(), (*name).to_owned());
                match s.leases.get(&key).cloned() {
                    None => (
                        404,
                        status(
                            404,
                            "NotFound",
                            &format!("leases.coordination.k8s.io \"{name}\" not found"),
                        ),
                    ),
                    Some(cur)
                        if cur["metadata"]["resourceVersion"]
                            != body["metadata"]["resourceVersion"] =>
                    {
                        (
                            409,
                            status(
                                409,
                                "Conflict",
                                &format!(
                                    "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                                ),
                            ),
                        )
                    }
                    Some(_) => {
                        s.rv += 1;
                        let mut l = body.clone();
                        l["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                        s.leases.insert(key, l.clone());
                        self.lease_changed(&mut s, "MODIFIED", &l);
                        (200, l)
                    }
                }
            }
            ("GET", ["api", "v1", "nodes", name]) => match s.nodes.get(*name) {
                Some(n) => (200, n.clone()),
                None => (
                    404,
                    status(404, "NotFound", &format!("nodes \"{name}\" not found")),
                ),
            },
            ("GET", ["api", "v1", "pods"]) => {
                let node = query
                    .get("fieldSelector")
                    .and_then(|f| f.strip_prefix("spec.nodeName="))
                    .map(str::to_owned);
                let limit: usize = query
                    .get("limit")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(usize::MAX);
                let skip: usize = query
                    .get("continue")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                let matching: Vec<Value> = s
                    .pods
                    .values()
                    .filter(|p| node.as_deref().is_none_or(|n| p["spec"]["nodeName"] == n))
                    .cloned()
                    .collect();
                let items: Vec<Value> = matching.iter().skip(skip).take(limit).cloned().collect();
                let mut meta = json!({"resourceVersion": s.rv.to_string()});
                if matching.len() > skip + items.len() {
                    meta["continue"] = json!((skip + items.len()).to_string());
                }
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": meta, "items": items}),
                )
            }
            ("PATCH", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
                let found = s
                    .pods
                    .iter()
                    .find(|(_, p)| {
                        p["metadata"]["namespace"] == *ns && p["metadata"]["name"] == *name
                    })
                    .map(|(u, _)| u.clone());
                match found {
                    None => (
                        404,
                        status(404, "NotFound", &format!("pods \"{name}\" not found")),
                    ),
                    Some(uid) if body["metadata"]["uid"].as_str().is_some_and(|w| w != uid) => (
                        409,
                        status(409, "Conflict", "Precondition failed: UID in precondition"),
                    ),
                    Some(uid) => {
                        s.rv += 1;
                        let rv = s.rv;
                        let pod = s.pods.get_mut(&uid).expect("pod");
                        let mut conds = pod["status"]["conditions"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default();
                        for c in body["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                        {
                            match conds.iter_mut().find(|o| o["type"] == c["type"]) {
                                Some(o) => *o = c.clone(),
                                None => conds.push(c.clone()),
                            }
                        }
                        pod["status"]["conditions"] = Value::Array(conds);
                        pod["metadata"]["resourceVersion"] = json!(rv.to_string());
                        (200, pod.clone())
                    }
                }
            }
            ("POST", ["apis", "events.k8s.io", "v1", "namespaces", _, "events"]) => {
                s.rv += 1;
                let mut ev = body.clone();
                ev["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                s.events.push(ev.clone());
                (201, ev)
            }
            _ => (
                404,
                status(404, "NotFound", &format!("{method} {path}: not served")),
            ),
        };
        let seen = Seen {
            who: who.to_owned(),
            at: Instant::now(),
            method,
            path,
            query,
            body,
            code,
        };
        self.record(&mut s, seen);
        respond(code, &out)
    }

    fn watch_leases(&self, query: &BTreeMap<String, String>) -> Response<RespBody> {
        let from: u64 = query
            .get("resourceVersion")
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        let sel = query.get("labelSelector").cloned().unwrap_or_default();
        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(1024);
        let (backlog, mut live) = {
            let s = self.state.lock();
            let live = self.lease_changes.subscribe();
            let backlog: Vec<(u64, String)> = s
                .lease_history
                .iter()
                .filter(|(r, _)| *r > from)
                .cloned()
                .collect();
            (backlog, live)
        };
        let wanted = move |line: &str| {
            sel.is_empty()
                || serde_json::from_str::<Value>(line)
                    .is_ok_and(|v| !v["object"]["metadata"]["labels"][sel.as_str()].is_null())
        };
        tokio::spawn(async move {
            let mut last = from;
            for (rv, line) in backlog {
                last = rv;
                if wanted(&line) && tx.send(Ok(Frame::data(Bytes::from(line)))).await.is_err() {
                    return;
                }
            }
            loop {
                tokio::select! {
                    () = tx.closed() => return,
                    change = live.recv() => match change {
                        Ok((rv, line)) if rv > last => {
                            last = rv;
                            if wanted(&line) && tx.send(Ok(Frame::data(Bytes::from(line)))).await.is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(_) => return,
                    },
                }
            }
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(StreamBody::new(ReceiverStream::new(rx)).boxed())
            .expect("response")
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

/// A node's prober renewing its lease (only the renewer: the rest is not in question here).
pub fn prober(cluster: &Cluster, node: &str) -> JoinHandle<()> {
    let renewer = Renewer::new(
        cluster.client_named(&format!("prober-{node}")),
        LeaseSettings {
            namespace: "podward".into(),
            node: node.into(),
            renew_interval: RENEW,
            duration: LEASE,
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
    let recorder = kube::runtime::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: "podward-sentinel".into(),
            instance: Some(identity.into()),
        },
    );
    let marker = Marker::new(
        client.clone(),
        Arc::new(KubeWriter::new(client.clone())),
        recorder,
        "podward.io/ready",
        clock,
    );
    let metrics = SentinelMetrics::new(None).expect("metrics");
    let task = tokio::spawn(sentinel::run(
        client,
        marker,
        settings(identity, rates),
        metrics.clone(),
        clock,
        std::future::pending(),
    ));
    (task, metrics)
}

pub fn fast() -> Rates {
    Rates {
        normal: 10.0,
        ..Rates::default()
    }
}
