//! A fake CRI runtime for the benchmark and the cgroup driver tests: a real tonic server on a
//! unix socket that implements the k8s-cri `RuntimeService` trait, answering `ListPodSandbox`,
//! `ListContainers` and `RuntimeConfig` from memory and `UNIMPLEMENTED` to everything else.

use std::path::Path;
use std::pin::Pin;

use podward_api::cri::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use podward_api::cri::*;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

/// What the fake runtime lists.
#[derive(Default)]
pub(crate) struct FakeCri {
    pub(crate) sandboxes: Vec<PodSandbox>,
    pub(crate) containers: Vec<Container>,
    /// `RuntimeConfig`'s `linux.cgroup_driver` (a `CgroupDriver` value); `None` answers
    /// UNIMPLEMENTED, as containerd 1.6 does.
    pub(crate) cgroup_driver: Option<i32>,
}

type Events =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<ContainerEventResponse, Status>> + Send>>;

/// The whole impl comes out of one macro so that `async_trait` sees every method expanded.
macro_rules! fake_runtime {
    ($($name:ident $req:ident $resp:ident),* $(,)?) => {
        #[tonic::async_trait]
        impl RuntimeService for FakeCri {
            async fn list_pod_sandbox(
                &self,
                _r: Request<ListPodSandboxRequest>,
            ) -> Result<Response<ListPodSandboxResponse>, Status> {
                Ok(Response::new(ListPodSandboxResponse { items: self.sandboxes.clone() }))
            }

            async fn list_containers(
                &self,
                _r: Request<ListContainersRequest>,
            ) -> Result<Response<ListContainersResponse>, Status> {
                Ok(Response::new(ListContainersResponse { containers: self.containers.clone() }))
            }

            async fn runtime_config(
                &self,
                _r: Request<RuntimeConfigRequest>,
            ) -> Result<Response<RuntimeConfigResponse>, Status> {
                match self.cgroup_driver {
                    Some(d) => Ok(Response::new(RuntimeConfigResponse {
                        linux: Some(LinuxRuntimeConfiguration { cgroup_driver: d }),
                    })),
                    None => Err(Status::unimplemented("runtime_config")),
                }
            }

            type GetContainerEventsStream = Events;

            async fn get_container_events(
                &self,
                _r: Request<GetEventsRequest>,
            ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
                Err(Status::unimplemented("get_container_events"))
            }

            $(
                async fn $name(&self, _r: Request<$req>) -> Result<Response<$resp>, Status> {
                    Err(Status::unimplemented(stringify!($name)))
                }
            )*
        }
    };
}

fake_runtime!(
    version VersionRequest VersionResponse,
    run_pod_sandbox RunPodSandboxRequest RunPodSandboxResponse,
    stop_pod_sandbox StopPodSandboxRequest StopPodSandboxResponse,
    remove_pod_sandbox RemovePodSandboxRequest RemovePodSandboxResponse,
    pod_sandbox_status PodSandboxStatusRequest PodSandboxStatusResponse,
    create_container CreateContainerRequest CreateContainerResponse,
    start_container StartContainerRequest StartContainerResponse,
    stop_container StopContainerRequest StopContainerResponse,
    remove_container RemoveContainerRequest RemoveContainerResponse,
    container_status ContainerStatusRequest ContainerStatusResponse,
    update_container_resources UpdateContainerResourcesRequest UpdateContainerResourcesResponse,
    reopen_container_log ReopenContainerLogRequest ReopenContainerLogResponse,
    exec_sync ExecSyncRequest ExecSyncResponse,
    exec ExecRequest ExecResponse,
    attach AttachRequest AttachResponse,
    port_forward PortForwardRequest PortForwardResponse,
    container_stats ContainerStatsRequest ContainerStatsResponse,
    list_container_stats ListContainerStatsRequest ListContainerStatsResponse,
    pod_sandbox_stats PodSandboxStatsRequest PodSandboxStatsResponse,
    list_pod_sandbox_stats ListPodSandboxStatsRequest ListPodSandboxStatsResponse,
    update_runtime_config UpdateRuntimeConfigRequest UpdateRuntimeConfigResponse,
    status StatusRequest StatusResponse,
    checkpoint_container CheckpointContainerRequest CheckpointContainerResponse,
    list_metric_descriptors ListMetricDescriptorsRequest ListMetricDescriptorsResponse,
    list_pod_sandbox_metrics ListPodSandboxMetricsRequest ListPodSandboxMetricsResponse,
);

/// Serves `cri` on `socket` in a background task.
pub(crate) fn serve(cri: FakeCri, socket: &Path) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(socket).expect("bind fake CRI socket");
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(
                RuntimeServiceServer::new(cri)
                    .max_encoding_message_size(podward_api::limits::CRI_MESSAGE_BYTES),
            )
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
    })
}
