//! The CRI methods whose calls feed the index, named by their gRPC `:path`.

/// A CRI method whose calls feed the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Watched {
    /// `RunPodSandbox`.
    RunPodSandbox,
    /// `StopPodSandbox`.
    StopPodSandbox,
    /// `RemovePodSandbox`.
    RemovePodSandbox,
    /// `CreateContainer`.
    CreateContainer,
    /// `StartContainer`.
    StartContainer,
    /// `StopContainer`.
    StopContainer,
    /// `RemoveContainer`.
    RemoveContainer,
    /// `ListPodSandbox`.
    ListPodSandbox,
    /// `ListContainers`.
    ListContainers,
    /// `PodSandboxStatus`.
    PodSandboxStatus,
    /// `ContainerStatus`.
    ContainerStatus,
}

impl Watched {
    /// The watched method named by a gRPC `:path`, if any.
    pub fn from_path(path: &str) -> Option<Self> {
        let method = path.strip_prefix("/runtime.v1.RuntimeService/")?;
        Some(match method {
            "RunPodSandbox" => Self::RunPodSandbox,
            "StopPodSandbox" => Self::StopPodSandbox,
            "RemovePodSandbox" => Self::RemovePodSandbox,
            "CreateContainer" => Self::CreateContainer,
            "StartContainer" => Self::StartContainer,
            "StopContainer" => Self::StopContainer,
            "RemoveContainer" => Self::RemoveContainer,
            "ListPodSandbox" => Self::ListPodSandbox,
            "ListContainers" => Self::ListContainers,
            "PodSandboxStatus" => Self::PodSandboxStatus,
            "ContainerStatus" => Self::ContainerStatus,
            _ => return None,
        })
    }

    /// Whether the call changes runtime state: its every answer is news (never skipped as a
    /// repeat), and its outcome decides whether a result was undelivered.
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            Self::RunPodSandbox
                | Self::StopPodSandbox
                | Self::RemovePodSandbox
                | Self::CreateContainer
                | Self::StartContainer
                | Self::StopContainer
                | Self::RemoveContainer
        )
    }

    /// Whether the request alone is news (kubelet decided to stop something), published as soon
    /// as the request body is in, long before the response (which can take the grace period).
    pub fn request_is_news(self) -> bool {
        matches!(self, Self::StopPodSandbox | Self::StopContainer)
    }
}
