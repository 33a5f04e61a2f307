//! One probe: JSON → `k8s_openapi` `Probe` → defaults → validation → [`ProbeSpec`].

use std::time::Duration;

use k8s_openapi::api::core::v1::Probe;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::strict;
use super::validate::{self, FieldErrors};
use super::{Handler, HttpGetSpec, HttpScheme, PortRef, ProbeSpec, ProbeType};

/// Decodes, defaults and validates one probe. Errors are `(field path, message)` pairs with paths
/// rooted at the probe's own key (`livenessProbe.periodSeconds`).
pub(super) fn probe_from_json(
    ty: ProbeType,
    raw: Value,
) -> Result<ProbeSpec, Vec<(String, String)>> {
    let root = ty.field_name();
    let probe: Probe = serde_json::from_value(raw.clone())
        .map_err(|e| vec![(root.to_owned(), format!("invalid probe: {e}"))])?;
    let mut errs = FieldErrors::new(root);
    // Strict decoding: a key `Probe` does not declare fails the probe (a misspelled threshold
    // or delay must not run the probe with the default instead).
    let decoded = serde_json::to_value(&probe).unwrap_or(Value::Null);
    for path in strict::unknown_paths(root, &raw, &decoded) {
        errs.push_path(strict::unknown_field(&path), path);
    }

    // SetDefaults_Probe: an absent or explicit 0 becomes the default; negatives stay and fail
    // validation below.
    let timeout = default_if_zero(probe.timeout_seconds, 1);
    let period = default_if_zero(probe.period_seconds, 10);
    let success = default_if_zero(probe.success_threshold, 1);
    let failure = default_if_zero(probe.failure_threshold, 3);
    let initial_delay = probe.initial_delay_seconds.unwrap_or(0);

    let handler = handler(&probe, &mut errs);
    errs.non_negative("initialDelaySeconds", initial_delay.into());
    errs.non_negative("timeoutSeconds", timeout.into());
    errs.non_negative("periodSeconds", period.into());
    errs.non_negative("successThreshold", success.into());
    errs.non_negative("failureThreshold", failure.into());
    if let Some(grace) = probe.termination_grace_period_seconds {
        if ty == ProbeType::Readiness {
            errs.invalid(
                "terminationGracePeriodSeconds",
                grace,
                "must not be set for readinessProbes",
            );
        } else if grace <= 0 {
            errs.invalid(
                "terminationGracePeriodSeconds",
                grace,
                "must be greater than 0",
            );
        }
    }
    if ty != ProbeType::Readiness && success != 1 {
        errs.invalid("successThreshold", success, "must be 1");
    }
    match handler {
        Some(handler) if errs.is_empty() => Ok(ProbeSpec {
            handler,
            initial_delay_seconds: initial_delay,
            timeout: secs(timeout),
            period: secs(period),
            success_threshold: positive(success),
            failure_threshold: positive(failure),
            termination_grace_period_seconds: probe.termination_grace_period_seconds,
        }),
        _ => Err(errs.into_vec()),
    }
}

fn default_if_zero(v: Option<i32>, default: i32) -> i32 {
    match v {
        None | Some(0) => default,
        Some(v) => v,
    }
}

fn secs(v: i32) -> Duration {
    Duration::from_secs(u64::try_from(v).unwrap_or(1))
}

fn positive(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(1)
}

/// validateHandler: exactly one handler, and that handler's own rules.
// One function on purpose: one block per handler kind, as in `validateHandler`, so the two read
// side by side.
fn handler(probe: &Probe, errs: &mut FieldErrors) -> Option<Handler> {
    let mut found: Vec<&'static str> = Vec::new();
    let mut out = None;
    if let Some(exec) = &probe.exec {
        found.push("exec");
        let command = exec.command.clone().unwrap_or_default();
        if command.is_empty() {
            errs.required("exec.command", "");
        }
        out = Some(Handler::Exec { command });
    }
    if let Some(get) = &probe.http_get {
        found.push("httpGet");
        // SetDefaults_HTTPGetAction: empty path => "/", empty scheme => HTTP.
        let path = get
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".to_owned());
        let scheme = match get.scheme.as_deref().unwrap_or("") {
            "" | "HTTP" => Some(HttpScheme::Http),
            "HTTPS" => Some(HttpScheme::Https),
            other => {
                errs.push(
                    "httpGet.scheme",
                    format!("Unsupported value: {other:?}: supported values: \"HTTP\", \"HTTPS\""),
                );
                None
            }
        };
        let port = port_ref(&get.port, "httpGet.port", errs);
        let mut headers = Vec::new();
        for (i, h) in get.http_headers.iter().flatten().enumerate() {
            validate::header_name(&h.name, &format!("httpGet.httpHeaders[{i}].name"), errs);
            headers.push((h.name.clone(), h.value.clone()));
        }
        if let (Some(scheme), Some(port)) = (scheme, port) {
            let host = get.host.clone().filter(|h| !h.is_empty());
            out = Some(Handler::HttpGet(HttpGetSpec {
                scheme,
                host,
                path,
                port,
                headers,
            }));
        }
    }
    if let Some(tcp) = &probe.tcp_socket {
        found.push("tcpSocket");
        if let Some(port) = port_ref(&tcp.port, "tcpSocket.port", errs) {
            out = Some(Handler::TcpSocket {
                host: tcp.host.clone().filter(|h| !h.is_empty()),
                port,
            });
        }
    }
    if let Some(grpc) = &probe.grpc {
        found.push("grpc");
        match u16::try_from(grpc.port).ok().filter(|p| *p > 0) {
            Some(port) => {
                out = Some(Handler::Grpc {
                    port,
                    service: grpc.service.clone(),
                })
            }
            None => errs.invalid("grpc.port", grpc.port, validate::PORT_RANGE_MSG),
        }
    }
    match found.as_slice() {
        [] => {
            errs.push_root("Required value: must specify a handler type".to_owned());
            None
        }
        [_] => out,
        [_, rest @ ..] => {
            for name in rest {
                errs.push(
                    name,
                    "Forbidden: may not specify more than 1 handler type".to_owned(),
                );
            }
            None
        }
    }
}

/// validatePortNumOrName.
fn port_ref(port: &IntOrString, field: &str, errs: &mut FieldErrors) -> Option<PortRef> {
    match port {
        IntOrString::Int(n) => {
            if (1..=65535).contains(n) {
                Some(PortRef::Number(*n))
            } else {
                errs.invalid(field, n, validate::PORT_RANGE_MSG);
                None
            }
        }
        IntOrString::String(name) => {
            let before = errs.len();
            validate::port_name(name, field, errs);
            (errs.len() == before).then(|| PortRef::Name(name.clone()))
        }
    }
}
