//! The takeover of one pod: which probes move into `podward.io/probes`, and the JSON Patch
//! (RFC 6902) that moves them, against the pod exactly as the API server sent it.
//!
//! Only what is certain to be probed the same way moves: the probes of the pod's containers and
//! of its restartable init containers (sidecars) without a startup probe; a pod that the prober
//! could not run as the kubelet would (an invalid probe, a probe naming a `host`, a node that may
//! not run podward) is left to the kubelet, whole.

use serde_json::{Map, Value, json};

use crate::kubernetes::names::MOVED_ANNOTATION;
use crate::kubernetes::names::{OPT_IN_ANNOTATION, PROBES_ANNOTATION};
use crate::spec::ProbeType;

/// The API server's bound on all annotations of an object together (keys and values,
/// `TotalAnnotationSizeLimitB`).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// What the webhook adds besides the annotation: the readiness gate and the node label that
/// keeps a taken-over pod on nodes running podward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The readiness-gate condition type the prober writes (`podward.io/ready`).
    pub gate_condition: String,
    /// A `nodeSelector` entry that only nodes running podward carry; `None` when every node
    /// of the cluster runs podward (nothing is added then).
    pub node_selector: Option<(String, String)>,
}

/// Why a pod is admitted unchanged; the `reason` label of `podward_admission_skipped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    /// The request is not a pod CREATE (the configuration sends only those; kept for safety).
    NotPodCreate,
    /// The object is not a pod the webhook can read.
    Undecodable,
    /// The pod already carries `podward.io/probes`: its author chose.
    AlreadyAnnotated,
    /// The pod opts out (`podward.io/probes-takeover: "false"`).
    OptedOut,
    /// No container has a probe that can move.
    NoProbes,
    /// A probe names a `host`, which the prober's host policy may refuse.
    ProbeNamesHost,
    /// A probe the API server would reject: the pod goes to validation unchanged.
    InvalidProbe,
    /// The pod is bound to one node (`spec.nodeName`, or a DaemonSet's node affinity) that may
    /// not run podward.
    NodeBound,
    /// The pod's `nodeSelector` asks for another value of podward's node label.
    NodeSelectorConflict,
    /// With podward's annotations the pod's would pass the API server's 256 KiB total: it
    /// would be refused.
    AnnotationsTooLarge,
}

impl SkipReason {
    /// Every reason, for the metric's zero series.
    pub const ALL: [SkipReason; 10] = [
        SkipReason::NotPodCreate,
        SkipReason::Undecodable,
        SkipReason::AlreadyAnnotated,
        SkipReason::OptedOut,
        SkipReason::NoProbes,
        SkipReason::ProbeNamesHost,
        SkipReason::InvalidProbe,
        SkipReason::NodeBound,
        SkipReason::NodeSelectorConflict,
        SkipReason::AnnotationsTooLarge,
    ];

    /// The metric label and log word.
    pub fn label(self) -> &'static str {
        match self {
            SkipReason::NotPodCreate => "not_pod_create",
            SkipReason::Undecodable => "undecodable",
            SkipReason::AlreadyAnnotated => "already_annotated",
            SkipReason::OptedOut => "opted_out",
            SkipReason::NoProbes => "no_probes",
            SkipReason::ProbeNamesHost => "probe_names_host",
            SkipReason::InvalidProbe => "invalid_probe",
            SkipReason::NodeBound => "node_bound",
            SkipReason::NodeSelectorConflict => "node_selector_conflict",
            SkipReason::AnnotationsTooLarge => "annotations_too_large",
        }
    }
}

/// The webhook's answer for one pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Move the probes: apply `patch` (JSON Patch operations).
    TakeOver {
        /// The JSON Patch, as a JSON array.
        patch: Value,
        /// What moved: container name to probe fields.
        moved: Map<String, Value>,
    },
    /// Admit the pod unchanged.
    Skip(SkipReason),
}

/// One container whose probes move.
struct Moving {
    list: &'static str,
    index: usize,
    name: String,
    probes: Vec<(ProbeType, Value)>,
}

/// Decides for `pod` (the AdmissionReview's `request.object`) under `policy`; the moved probes
/// carry the API server's defaults.
pub fn decide(pod: &Value, policy: &Policy) -> Decision {
    decide_with(pod, policy, true)
}

/// As [`decide`], with the probes moved exactly as written (no defaults): what `migrate` writes
/// into a manifest, so that `--revert` gives it back.
pub fn decide_as_written(pod: &Value, policy: &Policy) -> Decision {
    decide_with(pod, policy, false)
}

fn decide_with(pod: &Value, policy: &Policy, defaults: bool) -> Decision {
    let Some(spec) = pod.get("spec").and_then(Value::as_object) else {
        return Decision::Skip(SkipReason::Undecodable);
    };
    let annotations = pod
        .pointer("/metadata/annotations")
        .and_then(Value::as_object);
    if annotations.is_some_and(|a| a.contains_key(PROBES_ANNOTATION)) {
        return Decision::Skip(SkipReason::AlreadyAnnotated);
    }
    if annotations
        .and_then(|a| a.get(OPT_IN_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
    {
        return Decision::Skip(SkipReason::OptedOut);
    }
    let moving = match collect(spec, defaults) {
        Ok(m) => m,
        Err(reason) => return Decision::Skip(reason),
    };
    if moving.is_empty() {
        return Decision::Skip(SkipReason::NoProbes);
    }
    let mut probes = Map::new();
    let mut moved = Map::new();
    for m in &moving {
        let entry: Map<String, Value> = m
            .probes
            .iter()
            .map(|(ty, p)| (ty.field_name().to_owned(), p.clone()))
            .collect();
        let fields = m.probes.iter().map(|(ty, _)| json!(ty.field_name()));
        moved.insert(m.name.clone(), Value::Array(fields.collect()));
        probes.insert(m.name.clone(), Value::Object(entry));
    }
    let annotation = Value::Object(probes).to_string();
    if !crate::spec::parse_pod_probes(&annotation).errors.is_empty() {
        return Decision::Skip(SkipReason::InvalidProbe);
    }
    let node_op = match node_scope(spec, policy) {
        Ok(op) => op,
        Err(reason) => return Decision::Skip(reason),
    };
    let mut ops: Vec<Value> = Vec::new();
    for m in &moving {
        for (ty, _) in &m.probes {
            let path = format!("/spec/{}/{}/{}", m.list, m.index, ty.field_name());
            ops.push(json!({"op": "remove", "path": path}));
        }
    }
    let needs_gate = moving.iter().any(|m| {
        m.probes
            .iter()
            .any(|(ty, _)| matches!(ty, ProbeType::Readiness | ProbeType::Startup))
    });
    let mut record = Map::new();
    record.insert("containers".to_owned(), Value::Object(moved.clone()));
    if needs_gate && let Some(op) = gate_op(spec, &policy.gate_condition) {
        ops.push(op);
        record.insert("readinessGate".to_owned(), json!(policy.gate_condition));
    }
    if let Some((op, key, value)) = node_op {
        ops.push(op);
        record.insert("nodeSelector".to_owned(), json!({ key: value }));
    }
    let added = [
        (PROBES_ANNOTATION, annotation),
        (MOVED_ANNOTATION, Value::Object(record).to_string()),
    ];
    let existing: usize = annotations
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    let ours: usize = added.iter().map(|(k, v)| k.len() + v.len()).sum();
    if existing + ours > MAX_ANNOTATIONS_BYTES {
        return Decision::Skip(SkipReason::AnnotationsTooLarge);
    }
    match pod.pointer("/metadata/annotations") {
        Some(Value::Object(_)) => {
            for (key, value) in added {
                let path = format!("/metadata/annotations/{}", escape(key));
                ops.push(json!({"op": "add", "path": path, "value": value}));
            }
        }
        _ => {
            let map: Map<String, Value> = added
                .into_iter()
                .map(|(k, v)| (k.to_owned(), Value::String(v)))
                .collect();
            if pod.get("metadata").is_some_and(Value::is_object) {
                ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": map}));
            } else {
                let metadata = json!({ "annotations": map });
                ops.push(json!({"op": "add", "path": "/metadata", "value": metadata}));
            }
        }
    }
    Decision::TakeOver {
        patch: Value::Array(ops),
        moved,
    }
}

/// The containers whose probes move, with the probes defaulted; an error when the pod as a
/// whole stays with the kubelet.
fn collect(spec: &Map<String, Value>, defaults: bool) -> Result<Vec<Moving>, SkipReason> {
    let mut out = Vec::new();
    for list in ["initContainers", "containers"] {
        let Some(items) = spec.get(list) else {
            continue;
        };
        let Some(items) = items.as_array() else {
            if items.is_null() {
                continue;
            }
            return Err(SkipReason::Undecodable);
        };
        for (index, c) in items.iter().enumerate() {
            let Some(c) = c.as_object() else {
                return Err(SkipReason::Undecodable);
            };
            if list == "initContainers" && !is_sidecar(c) {
                continue;
            }
            // A sidecar's startup probe decides when the next init container starts: only the
            // kubelet can hold that start, so such a sidecar keeps all its probes.
            if list == "initContainers" && c.get("startupProbe").is_some_and(|p| !p.is_null()) {
                continue;
            }
            let Some(name) = c.get("name").and_then(Value::as_str) else {
                return Err(SkipReason::Undecodable);
            };
            let mut probes = Vec::new();
            for ty in [
                ProbeType::Liveness,
                ProbeType::Readiness,
                ProbeType::Startup,
            ] {
                match c.get(ty.field_name()) {
                    None | Some(Value::Null) => {}
                    Some(Value::Object(p)) => {
                        if names_host(p) {
                            return Err(SkipReason::ProbeNamesHost);
                        }
                        let p = if defaults {
                            with_defaults(p)
                        } else {
                            p.clone()
                        };
                        probes.push((ty, Value::Object(p)));
                    }
                    Some(_) => return Err(SkipReason::Undecodable),
                }
            }
            if !probes.is_empty() {
                out.push(Moving {
                    list,
                    index,
                    name: name.to_owned(),
                    probes,
                });
            }
        }
    }
    Ok(out)
}

/// A restartable init container (`restartPolicy: Always`): probed like a container.
fn is_sidecar(c: &Map<String, Value>) -> bool {
    c.get("restartPolicy").and_then(Value::as_str) == Some("Always")
}

/// Whether an `httpGet` or `tcpSocket` handler names a host other than the pod's IP.
fn names_host(p: &Map<String, Value>) -> bool {
    ["httpGet", "tcpSocket"].iter().any(|h| {
        p.get(*h)
            .and_then(|a| a.get("host"))
            .and_then(Value::as_str)
            .is_some_and(|host| !host.is_empty())
    })
}

/// The probe with the API server's defaults (`SetDefaults_Probe`, `SetDefaults_HTTPGetAction`,
/// the gRPC service's `+default=""`): absent, null or 0 thresholds and durations take their
/// default, an empty HTTP path and scheme too. Every other field stays as it is.
pub fn with_defaults(p: &Map<String, Value>) -> Map<String, Value> {
    let mut p = p.clone();
    for (field, default) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        let zero = match p.get(field) {
            None | Some(Value::Null) => true,
            Some(v) => v.as_i64() == Some(0),
        };
        if zero {
            p.insert(field.to_owned(), json!(default));
        }
    }
    if let Some(Value::Object(http)) = p.get_mut("httpGet") {
        for (field, default) in [("path", "/"), ("scheme", "HTTP")] {
            let empty = match http.get(field) {
                None | Some(Value::Null) => true,
                Some(v) => v.as_str() == Some(""),
            };
            if empty {
                http.insert(field.to_owned(), json!(default));
            }
        }
    }
    if let Some(Value::Object(grpc)) = p.get_mut("grpc")
        && grpc.get("service").is_none_or(Value::is_null)
    {
        grpc.insert("service".to_owned(), json!(""));
    }
    p
}

/// The operation that adds the readiness gate, unless the pod lists it already.
fn gate_op(spec: &Map<String, Value>, condition: &str) -> Option<Value> {
    let gate = json!({ "conditionType": condition });
    match spec.get("readinessGates") {
        Some(Value::Array(gates)) => {
            let listed = gates
                .iter()
                .any(|g| g.get("conditionType").and_then(Value::as_str) == Some(condition));
            (!listed).then(|| json!({"op": "add", "path": "/spec/readinessGates/-", "value": gate}))
        }
        _ => Some(json!({"op": "add", "path": "/spec/readinessGates", "value": [gate]})),
    }
}

/// The operation that keeps the pod on nodes running podward (`None`: nothing to add), and the
/// entry it adds.
type NodeOp = Option<(Value, String, String)>;

/// Where the pod may run: the podward node label joins its `nodeSelector` (which every
/// scheduling rule ANDs with), unless it is there already. A pod bound to one node before
/// scheduling (`spec.nodeName`, a DaemonSet pod's `matchFields` on `metadata.name`) would be
/// refused by that node's kubelet instead of waiting for a podward node: it stays with the
/// kubelet unless its own selector already asks for podward's label.
fn node_scope(spec: &Map<String, Value>, policy: &Policy) -> Result<NodeOp, SkipReason> {
    let Some((key, value)) = &policy.node_selector else {
        return Ok(None);
    };
    let selector = spec.get("nodeSelector").and_then(Value::as_object);
    match selector.and_then(|s| s.get(key.as_str())) {
        Some(v) if v.as_str() == Some(value.as_str()) => return Ok(None),
        Some(_) => return Err(SkipReason::NodeSelectorConflict),
        None => {}
    }
    if bound_to_a_node(spec) {
        return Err(SkipReason::NodeBound);
    }
    let op = match selector {
        Some(_) => json!({
            "op": "add",
            "path": format!("/spec/nodeSelector/{}", escape(key)),
            "value": value,
        }),
        None => {
            json!({"op": "add", "path": "/spec/nodeSelector", "value": { key.as_str(): value }})
        }
    };
    Ok(Some((op, key.clone(), value.clone())))
}

/// Whether the pod names its node: `spec.nodeName`, or required node affinity whose every term
/// matches `metadata.name` (how the DaemonSet controller places its pods).
fn bound_to_a_node(spec: &Map<String, Value>) -> bool {
    if spec
        .get("nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty())
    {
        return true;
    }
    let terms = spec
        .get("affinity")
        .and_then(|a| a.pointer("/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"))
        .and_then(|r| r.get("nodeSelectorTerms"))
        .and_then(Value::as_array);
    terms.is_some_and(|terms| {
        !terms.is_empty()
            && terms.iter().all(|t| {
                t.get("matchFields")
                    .and_then(Value::as_array)
                    .is_some_and(|f| {
                        f.iter()
                            .any(|e| e.get("key").and_then(Value::as_str) == Some("metadata.name"))
                    })
            })
    })
}

/// A JSON Pointer reference token for `key` (RFC 6901: `~` as `~0`, `/` as `~1`).
pub fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}
