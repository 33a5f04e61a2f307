//! Raw call bytes to index observations. Input is whatever the caller and containerd sent, so a
//! message that does not decode is dropped with a debug log, never a panic; a message with an
//! invalid string is decoded with that string repaired (`podward_api::tolerant`), so one bad
//! annotation costs that annotation, not the sandbox — nor the whole List kubelet pulled.

use std::collections::BTreeSet;

use podward_api::cri;
use podward_api::labels;
use podward_api::shim::v1::Delivery;
use podward_api::tolerant::{self, Repair};
use prost::Message;

use super::raw::{Body, Outcome, Raw};
use super::watched::Watched;
use crate::index::Observation;
use crate::keep::{self, prune};

/// What decoding one observation took: the repairs made to its messages, and whether one of
/// them did not decode at all (what it told is then lost: the index is relisted).
#[derive(Debug, Default)]
pub struct Repairs {
    /// Repairs made.
    pub made: Vec<Repair>,
    /// A message did not decode.
    pub undecodable: bool,
}

/// A message read through [`prune`]: only what the index keeps.
struct Kept<M> {
    message: M,
    /// An object was left out of it (a List so decoded is not the complete state).
    dropped: bool,
    /// A kept field was past its bound.
    truncated: bool,
    /// The IDs of the objects in it with a kept field past its bound.
    truncated_ids: Vec<String>,
}

impl Repairs {
    fn parse<M: Message + Default>(&mut self, body: &Body) -> Option<M> {
        let Some(msg) = body.first_message() else {
            self.undecodable = true;
            return None;
        };
        self.decoded(tolerant::decode::<M, _>(msg))
    }

    /// The message cut down to `shape` (of the environment, only the variables in `env`) on
    /// the wire, then decoded.
    fn parse_kept<M: Message + Default>(
        &mut self,
        body: &Body,
        shape: prune::Shape,
        env: &BTreeSet<String>,
    ) -> Option<Kept<M>> {
        let Some(msg) = body.first_message() else {
            self.undecodable = true;
            return None;
        };
        let pruned = match prune::prune(msg, shape, env) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "observed message does not decode; ignored");
                self.undecodable = true;
                return None;
            }
        };
        let decoded = tolerant::decode::<M, _>(&pruned.bytes[..]);
        let dropped = decoded.as_ref().is_ok_and(tolerant::Decoded::dropped_any);
        Some(Kept {
            message: self.decoded(decoded)?,
            dropped,
            truncated: pruned.truncated,
            truncated_ids: pruned.truncated_ids,
        })
    }

    fn decoded<M>(&mut self, d: Result<tolerant::Decoded<M>, prost::DecodeError>) -> Option<M> {
        match d {
            Ok(d) => {
                self.made.extend(d.repairs);
                Some(d.message)
            }
            Err(e) => {
                tracing::debug!(error = %e, "observed message does not decode; ignored");
                self.undecodable = true;
                None
            }
        }
    }
}

/// The environment variables a CreateContainer's pod probes can expand (its sandbox config's
/// `podward.io/probes`).
fn probe_env_names(request: &Body) -> BTreeSet<String> {
    let no_env = BTreeSet::new();
    let Some(msg) = request.first_message() else {
        return no_env;
    };
    let Ok(p) = prune::prune(msg, prune::CREATE_CONTAINER_SANDBOX_ANNOTATIONS, &no_env) else {
        return no_env;
    };
    let Ok(q) = cri::CreateContainerRequest::decode(&p.bytes[..]) else {
        return no_env;
    };
    let annotations = q.sandbox_config.map(|c| c.annotations).unwrap_or_default();
    keep::env_names(annotations.get(labels::PODWARD_PROBES).map(String::as_str))
}

fn truncated_sandboxes(ids: Vec<String>) -> Option<Observation> {
    (!ids.is_empty()).then_some(Observation::Truncated {
        sandbox_ids: ids,
        container_ids: Vec::new(),
    })
}

fn truncated_containers(ids: Vec<String>) -> Option<Observation> {
    (!ids.is_empty()).then_some(Observation::Truncated {
        sandbox_ids: Vec::new(),
        container_ids: ids,
    })
}

/// Decodes one raw observation into what it tells the index (often nothing), and what had to be
/// repaired for it.
pub fn decode(raw: Raw) -> (Vec<Observation>, Repairs) {
    let mut repairs = Repairs::default();
    let obs = decode_with(raw, &mut repairs);
    (obs, repairs)
}

fn decode_with(raw: Raw, r: &mut Repairs) -> Vec<Observation> {
    match raw {
        Raw::Request {
            method,
            body,
            at_ns,
        } => decode_request(method, &body, at_ns, r)
            .into_iter()
            .collect(),
        Raw::Call {
            method,
            request,
            response,
            grpc_status,
            outcome,
            requested_at_ns,
            completed_at_ns,
        } => {
            if outcome == Outcome::Abandoned {
                return decode_abandoned(method, &request, r).into_iter().collect();
            }
            if grpc_status != Some(0) {
                return Vec::new();
            }
            let delivery = match outcome {
                Outcome::Delivered => Delivery::Delivered,
                Outcome::Undelivered | Outcome::Abandoned => Delivery::Undelivered,
            };
            let call = Call {
                method,
                request: &request,
                response: &response,
                delivery,
                requested_at_ns,
                completed_at_ns,
            };
            call.decode(r)
        }
    }
}

fn decode_request(
    method: Watched,
    body: &Body,
    at_ns: i64,
    r: &mut Repairs,
) -> Option<Observation> {
    match method {
        Watched::StopPodSandbox => {
            let q: cri::StopPodSandboxRequest = r.parse(body)?;
            Some(Observation::SandboxStop {
                id: q.pod_sandbox_id,
                requested_at_ns: at_ns,
                completed: false,
            })
        }
        Watched::StopContainer => {
            let q: cri::StopContainerRequest = r.parse(body)?;
            Some(Observation::ContainerStop {
                id: q.container_id,
                timeout_seconds: q.timeout,
                requested_at_ns: at_ns,
                completed: false,
            })
        }
        _ => None,
    }
}

fn decode_abandoned(method: Watched, request: &Body, r: &mut Repairs) -> Option<Observation> {
    match method {
        Watched::RunPodSandbox => {
            let q: cri::RunPodSandboxRequest = r
                .parse_kept(request, prune::RUN_POD_SANDBOX_REQUEST, &BTreeSet::new())?
                .message;
            Some(Observation::SandboxRunAbandoned {
                metadata: q.config?.metadata?,
            })
        }
        Watched::CreateContainer => {
            let q: cri::CreateContainerRequest = r
                .parse_kept(request, prune::CREATE_CONTAINER_REQUEST, &BTreeSet::new())?
                .message;
            Some(Observation::ContainerCreateAbandoned {
                sandbox_id: q.pod_sandbox_id,
                metadata: q.config?.metadata?,
            })
        }
        _ => None,
    }
}

/// A successful call's bytes.
struct Call<'a> {
    method: Watched,
    request: &'a Body,
    response: &'a Body,
    delivery: Delivery,
    requested_at_ns: i64,
    completed_at_ns: i64,
}

impl Call<'_> {
    /// The call's observation, then the entries it marks truncated, if any.
    fn decode(&self, r: &mut Repairs) -> Vec<Observation> {
        let mut truncated = None;
        let obs = self.observation(r, &mut truncated);
        obs.into_iter().chain(truncated).collect()
    }

    // Long, but flat: one short arm per watched method, which reads better side by side than
    // spread over one function each.
    fn observation(
        &self,
        r: &mut Repairs,
        truncated: &mut Option<Observation>,
    ) -> Option<Observation> {
        let (req, resp) = (self.request, self.response);
        let no_env = BTreeSet::new();
        Some(match self.method {
            Watched::RunPodSandbox => {
                let q: Kept<cri::RunPodSandboxRequest> =
                    r.parse_kept(req, prune::RUN_POD_SANDBOX_REQUEST, &no_env)?;
                let a: cri::RunPodSandboxResponse = r.parse(resp)?;
                if q.truncated {
                    *truncated = truncated_sandboxes(vec![a.pod_sandbox_id.clone()]);
                }
                Observation::SandboxRun {
                    config: q.message.config?,
                    runtime_handler: q.message.runtime_handler,
                    sandbox_id: a.pod_sandbox_id,
                    delivery: self.delivery,
                    at_ns: self.completed_at_ns,
                }
            }
            Watched::StopPodSandbox => {
                let q: cri::StopPodSandboxRequest = r.parse(req)?;
                Observation::SandboxStop {
                    id: q.pod_sandbox_id,
                    requested_at_ns: self.requested_at_ns,
                    completed: true,
                }
            }
            Watched::RemovePodSandbox => {
                let q: cri::RemovePodSandboxRequest = r.parse(req)?;
                Observation::SandboxRemove {
                    id: q.pod_sandbox_id,
                }
            }
            Watched::CreateContainer => {
                let env = probe_env_names(req);
                let q: Kept<cri::CreateContainerRequest> =
                    r.parse_kept(req, prune::CREATE_CONTAINER_REQUEST, &env)?;
                let a: cri::CreateContainerResponse = r.parse(resp)?;
                if q.truncated {
                    *truncated = truncated_containers(vec![a.container_id.clone()]);
                }
                Observation::ContainerCreate {
                    sandbox_id: q.message.pod_sandbox_id,
                    config: q.message.config?,
                    container_id: a.container_id,
                    delivery: self.delivery,
                    at_ns: self.completed_at_ns,
                }
            }
            Watched::StartContainer => {
                let q: cri::StartContainerRequest = r.parse(req)?;
                Observation::ContainerStart {
                    id: q.container_id,
                    at_ns: self.completed_at_ns,
                }
            }
            Watched::StopContainer => {
                let q: cri::StopContainerRequest = r.parse(req)?;
                Observation::ContainerStop {
                    id: q.container_id,
                    timeout_seconds: q.timeout,
                    requested_at_ns: self.requested_at_ns,
                    completed: true,
                }
            }
            Watched::RemoveContainer => {
                let q: cri::RemoveContainerRequest = r.parse(req)?;
                Observation::ContainerRemove { id: q.container_id }
            }
            Watched::ListPodSandbox => {
                let q: cri::ListPodSandboxRequest = r.parse(req)?;
                let a: Kept<cri::ListPodSandboxResponse> =
                    r.parse_kept(resp, prune::LIST_POD_SANDBOX_RESPONSE, &no_env)?;
                *truncated = truncated_sandboxes(a.truncated_ids);
                Observation::SandboxList {
                    items: a.message.items,
                    listed_at_ns: self.requested_at_ns,
                    // An object left out must not read as "removed".
                    complete: !a.dropped
                        && q.filter
                            .is_none_or(|f| f == cri::PodSandboxFilter::default()),
                }
            }
            Watched::ListContainers => {
                let q: cri::ListContainersRequest = r.parse(req)?;
                let a: Kept<cri::ListContainersResponse> =
                    r.parse_kept(resp, prune::LIST_CONTAINERS_RESPONSE, &no_env)?;
                *truncated = truncated_containers(a.truncated_ids);
                Observation::ContainerList {
                    items: a.message.containers,
                    listed_at_ns: self.requested_at_ns,
                    complete: !a.dropped
                        && q.filter
                            .is_none_or(|f| f == cri::ContainerFilter::default()),
                }
            }
            Watched::PodSandboxStatus => {
                let a: Kept<cri::PodSandboxStatusResponse> =
                    r.parse_kept(resp, prune::POD_SANDBOX_STATUS_RESPONSE, &no_env)?;
                *truncated = truncated_sandboxes(a.truncated_ids);
                Observation::SandboxStatus {
                    status: a.message.status?,
                    host_network: None,
                }
            }
            Watched::ContainerStatus => {
                let a: Kept<cri::ContainerStatusResponse> =
                    r.parse_kept(resp, prune::CONTAINER_STATUS_RESPONSE, &no_env)?;
                *truncated = truncated_containers(a.truncated_ids);
                Observation::ContainerStatus {
                    status: a.message.status?,
                    sandbox_id: None,
                    envs: None,
                }
            }
        })
    }
}
