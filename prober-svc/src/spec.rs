//! Probe specifications from the `podward.io/probes` pod annotation.
//!
//! The annotation is JSON keyed by container name; each value carries `livenessProbe`,
//! `readinessProbe` and `startupProbe` in the Kubernetes `Probe` schema, so users paste what they
//! already have in their pod spec. Each probe is decoded with `k8s-openapi`, defaulted like the API
//! server's `SetDefaults_Probe` and validated like `validateProbe`, and decoded strictly (a key
//! the schema does not declare is an error, as with `fieldValidation=Strict`). A bad probe is
//! dropped and reported on its own (container and field path), every other probe is kept: one
//! typo must not switch off the probes of a whole pod. (A pod that lists the readiness gate is
//! held not ready by any such error: the manager and the gate see to that.)

mod convert;
mod describe;
mod strict;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_json::Value;

/// Which of the three probes a spec is. It knows its kubelet name ([`ProbeType::name`], also its
/// `Display`) and its slot index ([`ProbeType::index`]); the order of the variants is the order
/// of worker keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeType {
    /// `livenessProbe`: failure at threshold restarts the container.
    Liveness,
    /// `readinessProbe`: decides whether the container is ready.
    Readiness,
    /// `startupProbe`: gates the two others until the container has started.
    Startup,
}

impl ProbeType {
    /// The three probe types, in the order kubelet creates their workers.
    pub const ALL: [ProbeType; 3] = [
        ProbeType::Startup,
        ProbeType::Readiness,
        ProbeType::Liveness,
    ];

    /// kubelet's name of the type (`"Liveness"`...): the `probe_type` label of its metrics and
    /// the word that starts its messages ("Liveness probe failed: ...").
    pub fn name(self) -> &'static str {
        match self {
            ProbeType::Liveness => "Liveness",
            ProbeType::Readiness => "Readiness",
            ProbeType::Startup => "Startup",
        }
    }

    /// A small index, 0 to 2, for per-type slots (the results cache keeps one per type).
    pub fn index(self) -> usize {
        match self {
            ProbeType::Liveness => 0,
            ProbeType::Readiness => 1,
            ProbeType::Startup => 2,
        }
    }

    /// The JSON key of this probe in a container spec (`"livenessProbe"`...).
    pub fn field_name(self) -> &'static str {
        match self {
            ProbeType::Liveness => "livenessProbe",
            ProbeType::Readiness => "readinessProbe",
            ProbeType::Startup => "startupProbe",
        }
    }
}

impl fmt::Display for ProbeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One validated probe with Kubernetes defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// What to run.
    pub handler: Handler,
    /// Seconds after the container started before the first probe (>= 0, default 0).
    pub initial_delay_seconds: i32,
    /// Per-probe timeout (`timeoutSeconds`, >= 1 s, default 1 s).
    pub timeout: Duration,
    /// Interval between probes (`periodSeconds`, >= 1 s, default 10 s).
    pub period: Duration,
    /// Consecutive successes to count as success (>= 1, default 1; must be 1 for liveness/startup).
    pub success_threshold: u32,
    /// Consecutive failures to count as failure (>= 1, default 3).
    pub failure_threshold: u32,
    /// Probe-level grace period for a kill caused by this probe (liveness/startup only; > 0).
    pub termination_grace_period_seconds: Option<i64>,
}

/// The action a probe runs; exactly one per probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    /// Run a command in the container through CRI `ExecSync`.
    Exec {
        /// argv, before `$(VAR)` expansion (non-empty).
        command: Vec<String>,
    },
    /// HTTP(S) GET.
    HttpGet(HttpGetSpec),
    /// TCP connect.
    TcpSocket {
        /// Host to dial instead of the pod IP (`None` when absent or empty).
        host: Option<String>,
        /// Port number or container port name.
        port: PortRef,
    },
    /// `grpc.health.v1.Health/Check` on the pod IP.
    Grpc {
        /// Port (1..=65535; gRPC probes take no named port).
        port: u16,
        /// Service name sent in the request (`None` sends "").
        service: Option<String>,
    },
}

/// An `httpGet` probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGetSpec {
    /// HTTP or HTTPS (default HTTP).
    pub scheme: HttpScheme,
    /// Host to connect to instead of the pod IP (`None` when absent or empty).
    pub host: Option<String>,
    /// Path and query, as given (default "/").
    pub path: String,
    /// Port number or container port name.
    pub port: PortRef,
    /// Extra request headers in order; names as given (canonicalised when sent).
    pub headers: Vec<(String, String)>,
}

/// URL scheme of an `httpGet` probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpScheme {
    /// Plain HTTP.
    Http,
    /// HTTPS, certificates never verified (as kubelet).
    Https,
}

/// A port as written in a probe: a number or a container port name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PortRef {
    /// A port number (validated to 1..=65535 at parse time).
    Number(i32),
    /// A named port of the container (resolved via the container's ports annotation).
    Name(String),
}

/// The probes of one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerProbes {
    /// `livenessProbe`, if present and valid.
    pub liveness: Option<ProbeSpec>,
    /// `readinessProbe`, if present and valid.
    pub readiness: Option<ProbeSpec>,
    /// `startupProbe`, if present and valid.
    pub startup: Option<ProbeSpec>,
}

/// Whether a container's liveness and readiness wait for its startup probe (kubelet's
/// `isContainerStarted`: a container with a startup probe is started only once that probe
/// succeeded; until then its other probes do not run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StartupGating {
    /// No startup probe: the container is started once it runs.
    #[default]
    Ungated,
    /// A startup probe: the container is started once the probe succeeded.
    Gated,
}

impl ContainerProbes {
    /// Whether this container's startup probe gates its other probes.
    pub fn startup_gating(&self) -> StartupGating {
        if self.startup.is_some() {
            StartupGating::Gated
        } else {
            StartupGating::Ungated
        }
    }

    /// The spec of one probe type, if any.
    pub fn get(&self, ty: ProbeType) -> Option<&ProbeSpec> {
        match ty {
            ProbeType::Liveness => self.liveness.as_ref(),
            ProbeType::Readiness => self.readiness.as_ref(),
            ProbeType::Startup => self.startup.as_ref(),
        }
    }

    fn slot(&mut self, ty: ProbeType) -> &mut Option<ProbeSpec> {
        match ty {
            ProbeType::Liveness => &mut self.liveness,
            ProbeType::Readiness => &mut self.readiness,
            ProbeType::Startup => &mut self.startup,
        }
    }
}

/// Why a probe (or the whole annotation) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct SpecError {
    /// Container name ("" when the annotation as a whole is unusable).
    pub container: String,
    /// Field path inside the container, e.g. `livenessProbe.httpGet.port` ("" for the whole entry).
    pub field: String,
    /// What is wrong, in the API server's words where it has some.
    pub message: String,
}

impl SpecError {
    fn render(&self) -> String {
        match (self.container.is_empty(), self.field.is_empty()) {
            (true, _) => format!("podward.io/probes: {}", self.message),
            (false, true) => format!("container {:?}: {}", self.container, self.message),
            (false, false) => format!(
                "container {:?}: {}: {}",
                self.container, self.field, self.message
            ),
        }
    }
}

/// Everything parsed from one pod's annotation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodProbes {
    /// Valid probes per container name (a container whose probes were all rejected is still
    /// listed).
    pub containers: BTreeMap<String, ContainerProbes>,
    /// Every rejected probe or entry, with container and field.
    pub errors: Vec<SpecError>,
}

/// Largest annotation accepted; the API server caps all annotations of an object at 256 KiB, so
/// anything bigger did not come from Kubernetes and is refused before parsing.
pub const MAX_ANNOTATION_BYTES: usize = 1 << 20;

/// Parses the `podward.io/probes` annotation. Never panics: invalid JSON or a non-object yields no
/// probes and one error; a bad container entry or probe is dropped with an error naming the
/// container and field, and the others are kept.
pub fn parse_pod_probes(annotation: &str) -> PodProbes {
    let mut out = PodProbes::default();
    if annotation.len() > MAX_ANNOTATION_BYTES {
        out.errors.push(whole(format!(
            "annotation is {} bytes, more than the {MAX_ANNOTATION_BYTES} accepted",
            annotation.len()
        )));
        return out;
    }
    let top: serde_json::Map<String, Value> = match serde_json::from_str(annotation) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            out.errors.push(whole(format!(
                "must be a JSON object keyed by container name, not {}",
                json_kind(&other)
            )));
            return out;
        }
        Err(e) => {
            out.errors.push(whole(format!("invalid JSON: {e}")));
            return out;
        }
    };
    for (container, entry) in top {
        let Value::Object(mut fields) = entry else {
            out.errors.push(SpecError {
                field: String::new(),
                message: format!(
                    "must be an object with probe fields, not {}",
                    json_kind(&entry)
                ),
                container,
            });
            continue;
        };
        let mut probes = ContainerProbes::default();
        // Other container fields (image, ports...) are ignored so that a whole container spec
        // can be pasted; a key no container has is an error, as in strict decoding.
        for key in fields.keys().filter(|k| !strict::is_container_field(k)) {
            out.errors.push(SpecError {
                container: container.clone(),
                field: key.clone(),
                message: strict::unknown_field(key),
            });
        }
        for ty in ProbeType::ALL {
            // `null` means "no probe", as in the API.
            let Some(raw) = fields.remove(ty.field_name()) else {
                continue;
            };
            if raw.is_null() {
                continue;
            }
            match convert::probe_from_json(ty, raw) {
                Ok(spec) => *probes.slot(ty) = Some(spec),
                Err(errs) => {
                    out.errors
                        .extend(errs.into_iter().map(|(field, message)| SpecError {
                            container: container.clone(),
                            field,
                            message,
                        }))
                }
            }
        }
        out.containers.insert(container, probes);
    }
    out
}

/// The message of a gated pod held not ready by `errors` (non-empty): the first error with its
/// container and field path, and how many more there are.
pub fn spec_invalid_message(errors: &[SpecError]) -> String {
    let Some(first) = errors.first() else {
        return String::new();
    };
    let mut message = if first.container.is_empty() {
        first.to_string()
    } else {
        format!("podward.io/probes: {first}")
    };
    if errors.len() > 1 {
        message.push_str(&format!(" (and {} more errors)", errors.len() - 1));
    }
    message
}

fn whole(message: String) -> SpecError {
    SpecError {
        container: String::new(),
        field: String::new(),
        message,
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
