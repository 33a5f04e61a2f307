//! [`MockApiServer`]: a Kubernetes API server stand-in on 127.0.0.1 for the prober's e2e tests
//! and benchmark (no real API server can be installed on these machines).
//!
//! A real HTTP/1.1 server (hyper) that the prober's kube-rs client reaches through a kubeconfig
//! ([`MockApiServer::write_kubeconfig`]). It keeps pods and events in memory and implements what
//! the prober uses, with the API server's semantics where they matter:
//! - `GET /api/v1/pods` list (`fieldSelector=spec.nodeName=`, `limit`/`continue` paging) and
//!   watch (`resourceVersion`, bookmarks, `410 Gone` for a version older than its history,
//!   `timeoutSeconds`);
//! - `PATCH /api/v1/namespaces/{ns}/pods/{name}/status` (apply, merge or strategic merge: the
//!   conditions list merged by `type`; a `metadata.uid` that differs is `422` Invalid, as the
//!   real API server answers: the uid is immutable);
//! - `coordination.k8s.io/v1` Leases, what the node-lease renewer and the sentinel send: get,
//!   create (`409 AlreadyExists`), replace with the resource-version check (`409 Conflict`; a
//!   missing lease `404 NotFound`), delete, list and watch by `labelSelector`;
//! - `POST` and `PATCH` of core `v1` and `events.k8s.io/v1` events (a patch of flat fields, as
//!   kubelet's strategic merge patch of `count`, `lastTimestamp`, `message` is, merged);
//! - `GET /api/v1/nodes/{name}` of the Nodes a test put (`404 NotFound` otherwise; a `uid` is
//!   given to a Node put without one): the node lease renewer reads its Node's uid (the lease's
//!   owner) and zone label, the sentinel whether an expired lease's Node still exists;
//!   [`MockApiServer::delete_node`] deletes the leases the Node owns, as the garbage collector
//!   does.
//!
//! Pod creation through mutating admission webhooks over HTTPS, `failurePolicy` honoured:
//! [`MockApiServer::create_pod`] ([`admission`]).
//!
//! Faults as real API servers have them: [`MockApiServer::drop_watches`] breaks every open watch
//! off mid-stream; [`MockApiServer::refuse_status_writes`] refuses one pod's status writes for
//! good; [`MockApiServer::stall`] holds one client's requests unanswered.
//!
//! Every request is recorded with its arrival time, its `User-Agent` and the status it was
//! answered ([`MockApiServer::requests`]), so tests assert what reached the API, from which of
//! several clients, and when. [`MockApiServer::set_available`] turns it into a
//! server answering `503` to everything (the API being down).

pub mod admission;
mod http;
mod store;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::driver::PodSpec;
use crate::error::HarnessError;

pub use self::store::Store;

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// When it arrived (wall clock).
    pub at: SystemTime,
    /// `GET`, `PATCH`...
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query, decoded.
    pub query: BTreeMap<String, String>,
    /// `Content-Type`, "" when absent.
    pub content_type: String,
    /// `User-Agent`, "" when absent: several clients of one server (two sentinels and the
    /// probers, say) are told apart by it, as the API server's audit log tells them.
    pub user_agent: String,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
    /// The status answered; `None` while the request is still being handled (a watch is
    /// answered `200` at once, before its stream).
    pub code: Option<u16>,
}

impl Recorded {
    /// Whether this is a write of pod `name`'s status.
    pub fn is_status_write(&self, name: &str) -> bool {
        self.method == "PATCH" && self.path.ends_with(&format!("/pods/{name}/status"))
    }

    /// The status the request writes for condition `ty`, if it does.
    pub fn condition(&self, ty: &str) -> Option<&Value> {
        self.body["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == ty)
    }
}

/// Shared between the accept loop, the connections and the test.
pub(crate) struct Shared {
    pub(crate) store: Mutex<Store>,
    pub(crate) changes: broadcast::Sender<store::Change>,
    pub(crate) requests: Mutex<Vec<Recorded>>,
    pub(crate) available: AtomicBool,
    pub(crate) bookmark_every: Duration,
    /// Bumped to end every open watch mid-stream ([`MockApiServer::drop_watches`]).
    pub(crate) drops: tokio::sync::watch::Sender<u64>,
    /// Pods (namespace, name) whose status writes are refused, with the answer's code and
    /// message ([`MockApiServer::refuse_status_writes`]).
    pub(crate) refused: Mutex<BTreeMap<(String, String), (u16, String)>>,
    /// Requests held unanswered: (`User-Agent`, path fragment) pairs
    /// ([`MockApiServer::stall`]).
    pub(crate) stalls: tokio::sync::watch::Sender<Vec<(String, String)>>,
    /// Record the bodies of requests (off for benchmarks: the writes are counted, not kept).
    pub(crate) keep_bodies: bool,
}

/// The mock API server. Dropping it stops it.
pub struct MockApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// How the mock behaves.
#[derive(Debug, Clone)]
pub struct MockOptions {
    /// Interval of BOOKMARK events on watches.
    pub bookmark_every: Duration,
    /// Watch events kept for watches that resume from an older version (older: `410 Gone`).
    pub history: usize,
    /// Record request bodies.
    pub keep_bodies: bool,
}

impl Default for MockOptions {
    fn default() -> Self {
        Self {
            bookmark_every: Duration::from_secs(1),
            history: 10_000,
            keep_bodies: true,
        }
    }
}

impl MockApiServer {
    /// Starts a mock on 127.0.0.1 (a free port) with default options.
    pub async fn start() -> Result<MockApiServer, HarnessError> {
        Self::start_with(MockOptions::default()).await
    }

    /// Starts a mock on 127.0.0.1 with `options`.
    pub async fn start_with(options: MockOptions) -> Result<MockApiServer, HarnessError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| HarnessError::Invalid(format!("bind the mock API server: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::Invalid(e.to_string()))?;
        let (changes, _) = broadcast::channel(65_536);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(options.history)),
            changes,
            requests: Mutex::new(Vec::new()),
            available: AtomicBool::new(true),
            bookmark_every: options.bookmark_every,
            drops: tokio::sync::watch::channel(0).0,
            refused: Mutex::new(BTreeMap::new()),
            stalls: tokio::sync::watch::channel(Vec::new()).0,
            keep_bodies: options.keep_bodies,
        });
        let task = tokio::spawn(http::serve(listener, shared.clone()));
        Ok(MockApiServer { addr, shared, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig pointing at this server to `dir/kubeconfig` and returns its path.
    pub fn write_kubeconfig(&self, dir: &Path) -> Result<PathBuf, HarnessError> {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: mock\n  cluster:\n    server: {}\n\
             users:\n- name: prober\n  user: {{}}\ncontexts:\n- name: mock\n  context:\n    cluster: mock\n    user: prober\n\
             current-context: mock\n",
            self.url()
        );
        std::fs::write(&path, text)
            .map_err(|e| HarnessError::Invalid(format!("kubeconfig: {e}")))?;
        Ok(path)
    }

    /// Answers every request with `503` while `false` (the API server down).
    pub fn set_available(&self, available: bool) {
        self.shared.available.store(available, Ordering::SeqCst);
    }

    /// Ends every open watch mid-stream, as an API server restart or a load balancer's idle
    /// timeout does: the response body breaks off without its final chunk, so the client sees
    /// a transport error and must resume (watches opened later are served as usual).
    pub fn drop_watches(&self) {
        self.shared.drops.send_modify(|n| *n += 1);
    }

    /// Refuses every later status write of pod `namespace/name` with `code` and `message`
    /// (`403`: an admission webhook's denial; `500` with etcd's "request is too large": a pod
    /// at etcd's size limit), for good.
    pub fn refuse_status_writes(&self, namespace: &str, name: &str, code: u16, message: &str) {
        self.shared.refused.lock().insert(
            (namespace.to_owned(), name.to_owned()),
            (code, message.to_owned()),
        );
    }

    /// Holds every request from the client named `user_agent` whose path contains `path`
    /// unanswered (a hung connection, an overloaded server) until [`MockApiServer::unstall`].
    pub fn stall(&self, user_agent: &str, path: &str) {
        self.shared
            .stalls
            .send_modify(|v| v.push((user_agent.to_owned(), path.to_owned())));
    }

    /// Answers the stalled requests, and stalls no more.
    pub fn unstall(&self) {
        self.shared.stalls.send_modify(Vec::clear);
    }

    /// Adds (or replaces) a pod object; watches see `ADDED` (or `MODIFIED`).
    pub fn put_pod(&self, pod: Value) {
        let change = self.shared.store.lock().put_pod(pod);
        if let Some(c) = change {
            let _ = self.shared.changes.send(c);
        }
    }

    /// Changes pod `uid` with `f`; watches see `MODIFIED`.
    pub fn modify_pod(&self, uid: &str, f: impl FnOnce(&mut Value)) {
        let change = self.shared.store.lock().modify_pod(uid, f);
        if let Some(c) = change {
            let _ = self.shared.changes.send(c);
        }
    }

    /// The pod object with `uid`, as stored now.
    pub fn pod(&self, uid: &str) -> Option<Value> {
        self.shared.store.lock().pod(uid)
    }

    /// The UID of pod `namespace/name`, if the mock has it.
    pub fn pod_uid(&self, namespace: &str, name: &str) -> Option<String> {
        self.shared.store.lock().uid_of(namespace, name)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().clone()
    }

    /// Number of requests so far, and how many of them were writes (not `GET`).
    pub fn counts(&self) -> (usize, usize) {
        let r = self.shared.requests.lock();
        (r.len(), r.iter().filter(|r| r.method != "GET").count())
    }

    /// Writes of pod `name`'s status so far.
    pub fn status_writes(&self, name: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_status_write(name))
            .collect()
    }

    /// Adds (or replaces) Node `node` (its `metadata.name`), served to `GET`.
    pub fn put_node(&self, node: Value) {
        self.shared.store.lock().put_node(node);
    }

    /// Node `name`, as stored now.
    pub fn node(&self, name: &str) -> Option<Value> {
        self.shared.store.lock().node(name).ok()
    }

    /// Deletes Node `name` and, as the garbage collector does, the leases it owns.
    pub fn delete_node(&self, name: &str) {
        let changes = self.shared.store.lock().delete_node(name);
        for c in changes {
            let _ = self.shared.changes.send(c);
        }
    }

    /// Lease `namespace/name`, as stored now.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.shared.store.lock().get_lease(namespace, name).ok()
    }

    /// Creates lease `lease` (its `metadata.name`) in `namespace`; watches see `ADDED`.
    pub fn create_lease(&self, namespace: &str, lease: Value) -> Result<Value, HarnessError> {
        let r = self.shared.store.lock().create_lease(namespace, lease);
        match r {
            Ok((l, change)) => {
                let _ = self.shared.changes.send(change);
                Ok(l)
            }
            Err((code, st)) => Err(HarnessError::Invalid(format!("create lease: {code} {st}"))),
        }
    }

    /// Changes lease `namespace/name` with `f` as an unconditional update would (a new
    /// resource version; watches see `MODIFIED`); false when there is no such lease.
    pub fn update_lease(&self, namespace: &str, name: &str, f: impl FnOnce(&mut Value)) -> bool {
        let mut store = self.shared.store.lock();
        let Ok(mut lease) = store.get_lease(namespace, name) else {
            return false;
        };
        f(&mut lease);
        if let Some(m) = lease["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        match store.replace_lease(namespace, name, lease) {
            Ok((_, change)) => {
                let _ = self.shared.changes.send(change);
                true
            }
            Err(_) => false,
        }
    }

    /// Every event object stored (after creates and patches), by name.
    pub fn events(&self) -> Vec<Value> {
        self.shared.store.lock().events()
    }
}

impl Drop for MockApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The API object of a pod the driver runs from `spec`, bound to `node`: what the API server
/// would hold for it (UID, annotations, containers, restart policy, grace), `Running`.
pub fn pod_object(spec: &PodSpec, node: &str) -> Value {
    let containers: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| json!({"name": c.name, "image": c.image, "command": c.command, "args": c.args}))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "uid": spec.uid,
            "annotations": spec.annotations,
            "labels": spec.labels,
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": spec.restart_policy.as_str(),
            "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
            "hostNetwork": spec.host_network,
            "containers": containers,
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
            ],
        },
    })
}
