//! Raw call bytes to index observations. Input is whatever the caller and containerd sent, so a
//! message that does not decode is dropped with a debug log, never a panic.

use podward_api::cri;
use podward_api::shim::v1::Delivery;
use prost::Message;

use super::{Body, Outcome, Raw, Watched};
use crate::index::Observation;

fn parse<M: Message + Default>(body: &Body) -> Option<M> {
    let msg = body.first_message()?;
    match M::decode(msg) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::debug!(error = %e, "observed message does not decode; ignored");
            None
        }
    }
}

/// Decodes one raw observation into what it tells the index (often nothing).
pub fn decode(raw: Raw) -> Vec<Observation> {
    match raw {
        Raw::Request {
            method,
            body,
            at_ns,
        } => decode_request(method, &body, at_ns).into_iter().collect(),
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
                return decode_abandoned(method, &request).into_iter().collect();
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
            call.decode().into_iter().collect()
        }
    }
}

fn decode_request(method: Watched, body: &Body, at_ns: i64) -> Option<Observation> {
    match method {
        Watched::StopPodSandbox => {
            let r: cri::StopPodSandboxRequest = parse(body)?;
            Some(Observation::SandboxStop {
                id: r.pod_sandbox_id,
                requested_at_ns: at_ns,
                completed: false,
            })
        }
        Watched::StopContainer => {
            let r: cri::StopContainerRequest = parse(body)?;
            Some(Observation::ContainerStop {
                id: r.container_id,
                timeout_seconds: r.timeout,
                requested_at_ns: at_ns,
                completed: false,
            })
        }
        _ => None,
    }
}

fn decode_abandoned(method: Watched, request: &Body) -> Option<Observation> {
    match method {
        Watched::RunPodSandbox => {
            let r: cri::RunPodSandboxRequest = parse(request)?;
            Some(Observation::SandboxRunAbandoned {
                metadata: r.config?.metadata?,
            })
        }
        Watched::CreateContainer => {
            let r: cri::CreateContainerRequest = parse(request)?;
            Some(Observation::ContainerCreateAbandoned {
                sandbox_id: r.pod_sandbox_id,
                metadata: r.config?.metadata?,
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
    fn decode(&self) -> Option<Observation> {
        let (req, resp) = (self.request, self.response);
        Some(match self.method {
            Watched::RunPodSandbox => {
                let q: cri::RunPodSandboxRequest = parse(req)?;
                let a: cri::RunPodSandboxResponse = parse(resp)?;
                Observation::SandboxRun {
                    config: q.config?,
                    runtime_handler: q.runtime_handler,
                    sandbox_id: a.pod_sandbox_id,
                    delivery: self.delivery,
                    at_ns: self.completed_at_ns,
                }
            }
            Watched::StopPodSandbox => {
                let q: cri::StopPodSandboxRequest = parse(req)?;
                Observation::SandboxStop {
                    id: q.pod_sandbox_id,
                    requested_at_ns: self.requested_at_ns,
                    completed: true,
                }
            }
            Watched::RemovePodSandbox => {
                let q: cri::RemovePodSandboxRequest = parse(req)?;
                Observation::SandboxRemove {
                    id: q.pod_sandbox_id,
                }
            }
            Watched::CreateContainer => {
                let q: cri::CreateContainerRequest = parse(req)?;
                let a: cri::CreateContainerResponse = parse(resp)?;
                Observation::ContainerCreate {
                    sandbox_id: q.pod_sandbox_id,
                    config: q.config?,
                    container_id: a.container_id,
                    delivery: self.delivery,
                    at_ns: self.completed_at_ns,
                }
            }
            Watched::StartContainer => {
                let q: cri::StartContainerRequest = parse(req)?;
                Observation::ContainerStart {
                    id: q.container_id,
                    at_ns: self.completed_at_ns,
                }
            }
            Watched::StopContainer => {
                let q: cri::StopContainerRequest = parse(req)?;
                Observation::ContainerStop {
                    id: q.container_id,
                    timeout_seconds: q.timeout,
                    requested_at_ns: self.requested_at_ns,
                    completed: true,
                }
            }
            Watched::RemoveContainer => {
                let q: cri::RemoveContainerRequest = parse(req)?;
                Observation::ContainerRemove { id: q.container_id }
            }
            Watched::ListPodSandbox => {
                let q: cri::ListPodSandboxRequest = parse(req)?;
                let a: cri::ListPodSandboxResponse = parse(resp)?;
                Observation::SandboxList {
                    items: a.items,
                    complete: q
                        .filter
                        .is_none_or(|f| f == cri::PodSandboxFilter::default()),
                }
            }
            Watched::ListContainers => {
                let q: cri::ListContainersRequest = parse(req)?;
                let a: cri::ListContainersResponse = parse(resp)?;
                Observation::ContainerList {
                    items: a.containers,
                    complete: q
                        .filter
                        .is_none_or(|f| f == cri::ContainerFilter::default()),
                }
            }
            Watched::PodSandboxStatus => {
                let a: cri::PodSandboxStatusResponse = parse(resp)?;
                Observation::SandboxStatus {
                    status: a.status?,
                    host_network: None,
                }
            }
            Watched::ContainerStatus => {
                let a: cri::ContainerStatusResponse = parse(resp)?;
                Observation::ContainerStatus {
                    status: a.status?,
                    sandbox_id: None,
                    envs: None,
                }
            }
        })
    }
}
