//! The node behind a node lease: its `uid` (the lease's owner, kubelet's `SetNodeOwnerFunc`, so
//! the garbage collector deletes the lease with the Node) and its zone label (copied onto the
//! lease: the sentinel groups leases by zone as the node lifecycle controller groups nodes).

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;

use super::labels::ZONE_LABEL;

/// What the renewer knows of its Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The Node's `metadata.uid`; `None` until a read found the Node.
    pub uid: Option<String>,
    /// The zone label (`None`: the Node has none, or cannot be read).
    pub zone: Option<String>,
}

impl NodeFacts {
    /// The lease's owner: the Node, as kubelet sets it (`apiVersion: v1`, `kind: Node`).
    pub fn owner(&self, node: &str) -> Option<OwnerReference> {
        Some(OwnerReference {
            api_version: "v1".to_owned(),
            kind: "Node".to_owned(),
            name: node.to_owned(),
            uid: self.uid.clone()?,
            ..OwnerReference::default()
        })
    }
}

/// Reads Node `node`: `Ok(None)` when it does not exist or cannot be read (no RBAC), `Err` when
/// the API did not answer (asked again at the next renewal).
pub async fn read(nodes: &Api<Node>, node: &str) -> Result<Option<NodeFacts>, kube::Error> {
    match nodes.get_opt(node).await {
        Ok(Some(n)) => {
            let zone = n
                .metadata
                .labels
                .and_then(|mut l| l.remove(ZONE_LABEL))
                .filter(|z| !z.is_empty());
            Ok(Some(NodeFacts {
                uid: n.metadata.uid.filter(|u| !u.is_empty()),
                zone,
            }))
        }
        Ok(None) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}
