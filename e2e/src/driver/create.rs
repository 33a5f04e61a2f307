//! One container created and started in a sandbox as kubelet does (removed again when it does
//! not start), for a pod's first start and for each restart.

use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::cri::{CreateContainerRequest, PodSandboxConfig, StartContainerRequest};
use tonic::transport::Channel;

use super::cri_config;
use super::spec::{ContainerSpec, PodSpec};
use crate::error::HarnessError;

/// CreateContainer + StartContainer for restart `attempt` of `c`; the new container's id. A
/// container that was created but failed to start is removed, so no half-started instance stays.
pub(super) async fn create_and_start(
    client: &mut RuntimeServiceClient<Channel>,
    sandbox_id: &str,
    sandbox_config: &PodSandboxConfig,
    spec: &PodSpec,
    c: &ContainerSpec,
    attempt: u32,
) -> Result<String, HarnessError> {
    let id = client
        .create_container(CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            config: Some(cri_config::container_config(spec, c, attempt)),
            sandbox_config: Some(sandbox_config.clone()),
        })
        .await
        .map_err(HarnessError::grpc("CreateContainer"))?
        .into_inner()
        .container_id;
    let started = client
        .start_container(StartContainerRequest {
            container_id: id.clone(),
        })
        .await;
    if let Err(status) = started {
        let _ = client
            .remove_container(podward_api::cri::RemoveContainerRequest {
                container_id: id.clone(),
            })
            .await;
        return Err(HarnessError::Grpc {
            call: "StartContainer",
            status,
        });
    }
    Ok(id)
}
