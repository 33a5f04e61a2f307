//! Pod networking for non-host-network sandboxes: Debian's `containernetworking-plugins`
//! bridge with host-local IPAM, on a bridge and /24 of the node's own, so nodes never share
//! addresses or interfaces. Traffic stays between the host and the node's pod namespaces (no
//! masquerading, no iptables rules).

use std::path::{Path, PathBuf};

use rand::Rng;
use serde_json::json;

use crate::error::HarnessError;

/// Where Debian installs the CNI plugins.
pub(crate) const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The node's pod network.
#[derive(Debug, Clone)]
pub(crate) struct PodNetwork {
    /// The bridge interface (`pwd<id>`), removed by teardown.
    pub(crate) bridge: String,
    /// The pods' subnet, e.g. `10.123.45.0/24`.
    pub(crate) subnet: String,
}

/// Whether the bridge, host-local and loopback plugins are installed.
pub(crate) fn available() -> bool {
    ["bridge", "host-local", "loopback"]
        .iter()
        .all(|p| Path::new(CNI_BIN_DIR).join(p).is_file())
}

/// A random `10.x.y.0/24` that no route on the host uses yet (another node's bridge, or the
/// machine's own networks).
fn free_subnet() -> String {
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let mut rng = rand::rng();
    loop {
        let (x, y) = (rng.random_range(100..=254u8), rng.random::<u8>());
        // /proc/net/route prints destinations as little-endian hex: 10.x.y.0 => 00yyxx0A.
        let dest = format!("00{y:02X}{x:02X}0A");
        if !routes
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(dest.as_str()))
        {
            return format!("10.{x}.{y}.0/24");
        }
    }
}

/// Writes the CNI config for node `id` into `conf_dir`, with IPAM state under `data_dir`.
pub(crate) fn configure(
    id: &str,
    conf_dir: &Path,
    data_dir: &Path,
) -> Result<PodNetwork, HarnessError> {
    let bridge = crate::cleanup::bridge_name(id);
    let subnet = free_subnet();
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": crate::cleanup::network_name(&bridge),
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{ "subnet": subnet }]],
                "dataDir": data_dir.to_string_lossy(),
            },
        }],
    });
    let file: PathBuf = conf_dir.join("10-podward-e2e.conflist");
    std::fs::write(&file, serde_json::to_vec_pretty(&conf)?)
        .map_err(HarnessError::io("write", &file))?;
    Ok(PodNetwork { bridge, subnet })
}
