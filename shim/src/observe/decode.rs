//! Raw call bytes to index observations. Input is whatever the caller and containerd sent, so a
//! message that does not decode is dropped with a debug log, never a panic; a message with an
//! invalid string is decoded with that string repaired (`podward_api::tolerant`), so one bad
//! annotation costs that annotation, not the sandbox — nor the whole List kubelet pulled.

use podward_api::cri;
use podward_api::shim::v1::Delivery;
use podward_api::tolerant::{self, Repair};
use prost::Message;

use super::{Body, Outcome, Raw, Watched};
use crate::index::Observation;

/// What decoding one observation took: the repairs made to its messages.
#[derive(Debug, Default)]
pub struct Repairs(pub Vec<Repair>);

impl Repairs {
    fn parse<M: Message + Default>(&mut self, body: &Body) -> Option<M> {
        self.parse_list(body).map(|(m, _)| m)
    }

    /// The message, and whether an object was left out of it (a List so decoded is not the
    /// complete state).
    fn parse_list<M: Message + Default>(&mut self, body: &Body) -> Option<(M, bool)> {
        let msg = body.first_message()?;
        match tolerant::decode::<M, _>(msg) {
            Ok(d) => {
                let dropped = d.dropped_any();
                self.0.extend(d.repairs);
                Some((d.message, dropped))
            }
            Err(e) => {
                tracing::debug!(error = %e, "observed message does not decode; ignored");
                None
            }
        }
    }
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
            call.decode(r).into_iter().collect()
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
            let q: cri::RunPodSandboxRequest = r.parse(request)?;
            Some(Observation::SandboxRunAbandoned {
                metadata: q.config?.metadata?,
            })
        }
        Watched::CreateContainer => {
            let q: cri::CreateContainerRequest = r.parse(request)?;
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
    // Long, but flat: one short arm per watched method, which reads better side by side than
    // spread over one function each.
    fn decode(&self, r: &mut Repairs) -> Option<Observation> {
        let (req, resp) = (self.request, self.response);
        Some(match self.method {
            Watched::RunPodSandbox => {
                let q: cri::RunPodSandboxRequest = r.parse(req)?;
                let a: cri::RunPodSandboxResponse = r.parse(resp)?;
                Observation::SandboxRun {
                    config: q.config?,
                    runtime_handler: q.runtime_handler,
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
                let q: cri::CreateContainerRequest = r.parse(req)?;
                let a: cri::CreateContainerResponse = r.parse(resp)?;
                Observation::ContainerCreate {
                    sandbox_id: q.pod_sandbox_id,
                    config: q.config?,
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
                let (a, dropped): (cri::ListPodSandboxResponse, _) = r.parse_list(resp)?;
                Observation::SandboxList {
                    items: a.items,
                    // An object left out must not read as "removed".
                    complete: !dropped
                        && q.filter
                            .is_none_or(|f| f == cri::PodSandboxFilter::default()),
                }
            }
            Watched::ListContainers => {
                let q: cri::ListContainersRequest = r.parse(req)?;
                let (a, dropped): (cri::ListContainersResponse, _) = r.parse_list(resp)?;
                Observation::ContainerList {
                    items: a.containers,
                    complete: !dropped
                        && q.filter
                            .is_none_or(|f| f == cri::ContainerFilter::default()),
                }
            }
            Watched::PodSandboxStatus => {
                let a: cri::PodSandboxStatusResponse = r.parse(resp)?;
                Observation::SandboxStatus {
                    status: a.status?,
                    host_network: None,
                }
            }
            Watched::ContainerStatus => {
                let a: cri::ContainerStatusResponse = r.parse(resp)?;
                Observation::ContainerStatus {
                    status: a.status?,
                    sandbox_id: None,
                    envs: None,
                }
            }
        })
    }
}
