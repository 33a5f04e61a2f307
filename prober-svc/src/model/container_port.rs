//! A container's declared ports, as kubelet writes them on every container it creates: the
//! `io.kubernetes.container.ports` annotation (kubelet's JSON of `[]v1.ContainerPort`). Named
//! probe ports resolve against them (`crate::handler::port`).

/// One entry of the container's `ports` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPort {
    /// Port name ("" when unnamed).
    pub name: String,
    /// The port number inside the container.
    pub container_port: i32,
    /// "TCP" (default), "UDP" or "SCTP".
    pub protocol: String,
}

/// The annotation is not a JSON list of container ports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid io.kubernetes.container.ports annotation: {0}")]
pub struct PortsAnnotationError(pub String);

/// Parses the `io.kubernetes.container.ports` annotation (kubelet's JSON of `[]v1.ContainerPort`).
pub fn parse_ports_annotation(json: &str) -> Result<Vec<ContainerPort>, PortsAnnotationError> {
    let ports: Vec<k8s_openapi::api::core::v1::ContainerPort> =
        serde_json::from_str(json).map_err(|e| PortsAnnotationError(e.to_string()))?;
    Ok(ports
        .into_iter()
        .map(|p| ContainerPort {
            name: p.name.unwrap_or_default(),
            container_port: p.container_port,
            protocol: p.protocol.unwrap_or_else(|| "TCP".to_owned()),
        })
        .collect())
}
