//! The mock API server's objects: pods and `coordination.k8s.io/v1` leases (with one
//! resource-version history for watches, as etcd has one revision for every kind), events and
//! Nodes (read only: what a test put).

mod lease;

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::{Value, json};

pub(crate) use self::lease::Selector;

/// What a change was to: watches of one kind, scope and selector filter on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// A pod, bound to this node ("" when unbound).
    Pod {
        /// `spec.nodeName`.
        node: String,
    },
    /// A lease of this namespace, with these labels.
    Lease {
        /// `metadata.namespace`.
        namespace: String,
        /// `metadata.labels`.
        labels: BTreeMap<String, String>,
    },
}

/// Which changes a watch (or list) wants.
#[derive(Debug, Clone)]
pub(crate) enum Filter {
    /// Pods, of one node when given (`fieldSelector=spec.nodeName=`).
    Pods {
        /// The node.
        node: Option<String>,
    },
    /// Leases, of one namespace when given, matching a label selector.
    Leases {
        /// The namespace (`None`: every namespace).
        namespace: Option<String>,
        /// `labelSelector`.
        selector: Selector,
    },
}

impl Filter {
    /// Whether a change to `scope` concerns this watch.
    pub(crate) fn wants(&self, scope: &Scope) -> bool {
        match (self, scope) {
            (Self::Pods { node }, Scope::Pod { node: n }) => node.as_ref().is_none_or(|w| w == n),
            (
                Self::Leases {
                    namespace,
                    selector,
                },
                Scope::Lease {
                    namespace: ns,
                    labels,
                },
            ) => namespace.as_ref().is_none_or(|w| w == ns) && selector.matches(labels),
            _ => false,
        }
    }

    /// The `kind` of a BOOKMARK object on this watch.
    pub(crate) fn bookmark_kind(&self) -> (&'static str, &'static str) {
        match self {
            Self::Pods { .. } => ("v1", "Pod"),
            Self::Leases { .. } => ("coordination.k8s.io/v1", "Lease"),
        }
    }
}

/// A change watches see: the resource version, what changed and the watch event line.
pub(crate) type Change = (u64, Scope, String);

/// Why a request failed: HTTP status and a `metav1.Status` body.
pub(crate) type Failure = (u16, Value);

/// Pods, leases and events in memory.
pub struct Store {
    rv: u64,
    pods: BTreeMap<String, Value>,
    by_name: HashMap<(String, String), String>,
    /// (namespace, name) → lease.
    leases: BTreeMap<(String, String), Value>,
    /// Recent changes, oldest first.
    history: VecDeque<Change>,
    cap: usize,
    events: BTreeMap<(String, String), Value>,
    /// name → Node.
    nodes: BTreeMap<String, Value>,
}

/// A `metav1.Status` failure body.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn node_of(pod: &Value) -> String {
    pod["spec"]["nodeName"].as_str().unwrap_or("").to_owned()
}

fn key_of(pod: &Value) -> (String, String) {
    (
        pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned(),
        pod["metadata"]["name"].as_str().unwrap_or("").to_owned(),
    )
}

impl Store {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            rv: 1000,
            pods: BTreeMap::new(),
            by_name: HashMap::new(),
            leases: BTreeMap::new(),
            history: VecDeque::new(),
            cap: cap.max(1),
            events: BTreeMap::new(),
            nodes: BTreeMap::new(),
        }
    }

    /// The current resource version.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    fn record(&mut self, ty: &str, pod: &Value) -> Change {
        let scope = Scope::Pod { node: node_of(pod) };
        self.record_as(ty, pod, scope)
    }

    /// Records a change at the current resource version.
    fn record_as(&mut self, ty: &str, object: &Value, scope: Scope) -> Change {
        let rv = self.rv;
        let line = format!("{}\n", json!({"type": ty, "object": object}));
        let change = (rv, scope, line);
        self.history.push_back(change.clone());
        while self.history.len() > self.cap {
            self.history.pop_front();
        }
        change
    }

    pub(crate) fn put_pod(&mut self, mut pod: Value) -> Option<Change> {
        let uid = pod["metadata"]["uid"].as_str()?.to_owned();
        self.rv += 1;
        pod["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let ty = if self.pods.contains_key(&uid) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.by_name.insert(key_of(&pod), uid.clone());
        let change = self.record(ty, &pod);
        self.pods.insert(uid, pod);
        Some(change)
    }

    pub(crate) fn modify_pod(&mut self, uid: &str, f: impl FnOnce(&mut Value)) -> Option<Change> {
        let mut pod = self.pods.get(uid)?.clone();
        f(&mut pod);
        self.put_pod(pod)
    }

    pub(crate) fn uid_of(&self, ns: &str, name: &str) -> Option<String> {
        self.by_name.get(&(ns.to_owned(), name.to_owned())).cloned()
    }

    pub(crate) fn pod(&self, uid: &str) -> Option<Value> {
        self.pods.get(uid).cloned()
    }

    /// A `PodList` page of the pods on `node` (all without one): `limit` items after the
    /// `cont` offset.
    pub(crate) fn list(
        &self,
        node: Option<&str>,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Value {
        let skip: usize = cont.and_then(|c| c.parse().ok()).unwrap_or(0);
        let matching = self
            .pods
            .values()
            .filter(|p| node.is_none_or(|n| node_of(p) == n));
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let items: Vec<Value> = matching.clone().skip(skip).take(limit).cloned().collect();
        let more = matching.count() > skip.saturating_add(items.len());
        let mut meta = json!({"resourceVersion": self.rv.to_string()});
        if more {
            meta["continue"] = json!((skip + items.len()).to_string());
        }
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": meta, "items": items})
    }

    /// Watch lines after `rv` that `filter` wants; `Err` when the history no longer reaches back
    /// there.
    pub(crate) fn since(&self, rv: u64, filter: &Filter) -> Result<Vec<(u64, String)>, Failure> {
        if let Some((oldest, _, _)) = self.history.front()
            && rv + 1 < *oldest
            && self.history.len() >= self.cap
        {
            return Err((
                410,
                status(
                    410,
                    "Expired",
                    &format!("too old resource version: {rv} ({oldest})"),
                ),
            ));
        }
        Ok(self
            .history
            .iter()
            .filter(|(r, scope, _)| *r > rv && filter.wants(scope))
            .map(|(r, _, l)| (*r, l.clone()))
            .collect())
    }

    /// Applies a status patch: conditions merged by `type`, other status fields replaced; a
    /// `metadata.uid` in the patch must match.
    pub(crate) fn patch_status(
        &mut self,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<(Value, Change), Failure> {
        let Some(uid) = self.by_name.get(&(ns.to_owned(), name.to_owned())).cloned() else {
            return Err((
                404,
                status(404, "NotFound", &format!("pods \"{name}\" not found")),
            ));
        };
        if let Some(want) = patch["metadata"]["uid"].as_str()
            && want != uid
        {
            // What a real API server answers: the uid is immutable (`ValidateObjectMetaUpdate`),
            // a 422 Invalid, not a 409 (a precondition is a DeleteOptions/Update thing).
            let mut st = status(
                422,
                "Invalid",
                &format!(
                    "Pod \"{name}\" is invalid: metadata.uid: Invalid value: \"{want}\": field is immutable"
                ),
            );
            st["details"] = json!({"name": name, "kind": "pods", "causes": [{
                "reason": "FieldValueInvalid",
                "message": format!("Invalid value: \"{want}\": field is immutable"),
                "field": "metadata.uid"}]});
            return Err((422, st));
        }
        let mut pod = self.pods.get(&uid).cloned().unwrap_or(Value::Null);
        if let Some(st) = patch["status"].as_object() {
            for (k, v) in st {
                if k == "conditions" {
                    let mut conds: Vec<Value> = pod["status"]["conditions"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    for c in v.as_array().into_iter().flatten() {
                        match conds.iter_mut().find(|o| o["type"] == c["type"]) {
                            Some(o) => *o = c.clone(),
                            None => conds.push(c.clone()),
                        }
                    }
                    pod["status"]["conditions"] = Value::Array(conds);
                } else {
                    pod["status"][k] = v.clone();
                }
            }
        }
        let change = self
            .put_pod(pod)
            .ok_or_else(|| (500, status(500, "InternalError", "no uid")))?;
        Ok((self.pods.get(&uid).cloned().unwrap_or(Value::Null), change))
    }

    pub(crate) fn create_event(&mut self, ns: &str, mut ev: Value) -> Result<Value, Failure> {
        let Some(name) = ev["metadata"]["name"].as_str().map(str::to_owned) else {
            return Err((422, status(422, "Invalid", "metadata.name: Required value")));
        };
        if self.events.contains_key(&(ns.to_owned(), name.clone())) {
            return Err((
                409,
                status(
                    409,
                    "AlreadyExists",
                    &format!("events \"{name}\" already exists"),
                ),
            ));
        }
        self.rv += 1;
        ev["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.events.insert((ns.to_owned(), name), ev.clone());
        Ok(ev)
    }

    pub(crate) fn patch_event(
        &mut self,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, Failure> {
        let Some(ev) = self.events.get_mut(&(ns.to_owned(), name.to_owned())) else {
            return Err((
                404,
                status(404, "NotFound", &format!("events \"{name}\" not found")),
            ));
        };
        merge_patch(ev, patch);
        self.rv += 1;
        ev["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        Ok(ev.clone())
    }

    /// Adds (or replaces) a Node, by its `metadata.name`.
    pub(crate) fn put_node(&mut self, mut node: Value) {
        let name = node["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if node["metadata"]["uid"].as_str().is_none_or(str::is_empty) {
            self.rv += 1;
            node["metadata"]["uid"] = json!(format!("node-{name}-{}", self.rv));
        }
        self.nodes.insert(name, node);
    }

    /// Deletes Node `name`, and as the garbage collector would, every lease it owns (an
    /// `ownerReferences` entry with its uid); the leases' deletions, for the watches.
    pub(crate) fn delete_node(&mut self, name: &str) -> Vec<Change> {
        let Some(node) = self.nodes.remove(name) else {
            return Vec::new();
        };
        let uid = node["metadata"]["uid"].as_str().unwrap_or("").to_owned();
        let owned: Vec<(String, String)> = self
            .leases
            .iter()
            .filter(|(_, l)| {
                l["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|o| o.iter().any(|r| r["uid"] == uid.as_str()))
            })
            .map(|(k, _)| k.clone())
            .collect();
        owned
            .into_iter()
            .filter_map(|(ns, n)| self.delete_lease(&ns, &n).ok().map(|(_, c)| c))
            .collect()
    }

    /// Node `name`.
    pub(crate) fn node(&self, name: &str) -> Result<Value, Failure> {
        self.nodes.get(name).cloned().ok_or_else(|| {
            (
                404,
                status(404, "NotFound", &format!("nodes \"{name}\" not found")),
            )
        })
    }

    /// Every event, by namespace and name.
    pub fn events(&self) -> Vec<Value> {
        self.events.values().cloned().collect()
    }
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (k, v) in p {
        if v.is_null() {
            if let Some(t) = target.as_object_mut() {
                t.remove(k);
            }
        } else {
            merge_patch(&mut target[k], v);
        }
    }
}
