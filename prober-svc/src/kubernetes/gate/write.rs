//! The gate's one write: server-side apply of the condition to a pod's `pods/status`, and what
//! the API server's answers mean for a retry.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::model::api_pod::GateCondition;

/// The field manager of the prober's writes (server-side apply).
pub const FIELD_MANAGER: &str = "podward-prober";

/// The pod a condition is written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (a precondition of the write).
    pub uid: String,
}

/// Why a write failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// 404: the pod is gone.
    #[error("the pod is gone")]
    Gone,
    /// 409: a concurrent change.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 422: the server refuses the write as invalid (retrying the same write cannot help).
    #[error("invalid: {0}")]
    Invalid(String),
    /// 429: the server throttles; retry after this long if it said.
    #[error("throttled by the API server")]
    Throttled(Option<Duration>),
    /// Anything else: the API unreachable, a 5xx, a dropped connection.
    #[error("{0}")]
    Failed(String),
}

/// Writes the condition to one pod; answers the pod's new resource version.
pub trait ConditionWriter: Send + Sync + 'static {
    /// Writes `condition` (of type `condition_type`) to `target`.
    fn write<'a>(
        &'a self,
        condition_type: &'a str,
        target: &'a Target,
        condition: &'a GateCondition,
    ) -> BoxFuture<'a, Result<String, WriteError>>;
}

/// The real writer: server-side apply of the one condition to `pods/status`.
pub struct KubeWriter {
    client: kube::Client,
}

impl KubeWriter {
    /// Writes through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

/// The apply configuration of one condition: nothing else of the pod, so the prober owns only
/// that condition's fields; `metadata.uid` makes the write fail (`422`, the uid is immutable) on
/// another pod instance under the same name.
pub fn apply_body(
    condition_type: &str,
    target: &Target,
    condition: &GateCondition,
) -> serde_json::Value {
    let mut c = serde_json::json!({
        "type": condition_type,
        "status": condition.status.as_str(),
        "lastTransitionTime": condition.last_transition_time,
    });
    if !condition.reason.is_empty() {
        c["reason"] = condition.reason.clone().into();
    }
    if !condition.message.is_empty() {
        c["message"] = condition.message.clone().into();
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": target.name, "namespace": target.namespace, "uid": target.uid},
        "status": {"conditions": [c]},
    })
}

impl ConditionWriter for KubeWriter {
    fn write<'a>(
        &'a self,
        condition_type: &'a str,
        target: &'a Target,
        condition: &'a GateCondition,
    ) -> BoxFuture<'a, Result<String, WriteError>> {
        Box::pin(async move {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &target.namespace);
            let body = apply_body(condition_type, target, condition);
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match api
                .patch_status(&target.name, &params, &Patch::Apply(&body))
                .await
            {
                Ok(pod) => Ok(pod.metadata.resource_version.unwrap_or_default()),
                Err(kube::Error::Api(s)) => Err(match s.code {
                    404 => WriteError::Gone,
                    // The uid in the apply body is immutable: another pod now has this name,
                    // and the one the write was for is gone (the reflector brings the new one).
                    422 if uid_refused(&s) => WriteError::Gone,
                    422 => WriteError::Invalid(s.message.clone()),
                    409 => WriteError::Conflict(s.message.clone()),
                    429 => WriteError::Throttled(
                        s.details
                            .as_ref()
                            .map(|d| Duration::from_secs(u64::from(d.retry_after_seconds)))
                            .filter(|d| !d.is_zero()),
                    ),
                    code => WriteError::Failed(format!("{code}: {}", s.message)),
                }),
                Err(e) => Err(WriteError::Failed(e.to_string())),
            }
        })
    }
}

/// Whether a `422` answer refuses the write's `metadata.uid` (the API server's "field is
/// immutable" for a UID that is not the object's).
fn uid_refused(s: &kube::core::Status) -> bool {
    s.details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid"))
        || s.message.contains("metadata.uid")
}
