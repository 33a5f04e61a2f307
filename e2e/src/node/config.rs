//! containerd's configuration for one test node, every path inside the node's temp dir.

use std::path::{Path, PathBuf};

use crate::images::PAUSE_IMAGE;

/// Paths of one node, all under its private directory.
#[derive(Debug, Clone)]
pub(crate) struct NodePaths {
    /// The node's temp dir.
    pub(crate) dir: PathBuf,
}

impl NodePaths {
    /// containerd's gRPC socket.
    pub(crate) fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
    /// containerd's persistent root.
    pub(crate) fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
    /// containerd's state dir (sockets, mounted rootfs of running tasks).
    pub(crate) fn state(&self) -> PathBuf {
        self.dir.join("state")
    }
    /// The generated config file.
    pub(crate) fn config(&self) -> PathBuf {
        self.dir.join("containerd.toml")
    }
    /// containerd's log.
    pub(crate) fn log(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }
    /// Registry host configs (`config_path`): `<dir>/certs.d/<host>/hosts.toml`.
    pub(crate) fn certs_d(&self) -> PathBuf {
        self.dir.join("certs.d")
    }
    /// Empty CNI dirs: only host-network sandboxes are used.
    pub(crate) fn cni(&self) -> PathBuf {
        self.dir.join("cni")
    }
}

/// A TOML basic string holding `s` (quotes and escapes as needed).
fn q(s: impl AsRef<str>) -> String {
    toml::Value::String(s.as_ref().to_owned()).to_string()
}

fn qp(p: &Path) -> String {
    q(p.to_string_lossy())
}

/// The containerd (config version 2) file for `paths` using `snapshotter`.
pub(crate) fn containerd_toml(paths: &NodePaths, snapshotter: &str, cni_bin: &Path) -> String {
    let cri = r#"plugins."io.containerd.grpc.v1.cri""#;
    format!(
        r#"version = 2
root = {root}
state = {state}
oom_score = 0
# Plugins that would probe the host for nothing (and slow the start).
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = {sock}

[ttrpc]
  address = {ttrpc}

[debug]
  address = {debug}
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[{cri}]
  sandbox_image = {pause}
  # The sandbox's oom_score_adj cannot be lowered on the machines the tests run on: without
  # this, RunPodSandbox fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  systemd_cgroup = false
  enable_selinux = false
  max_container_log_line_size = 16384
  # Pod network namespaces are bind-mounted under the node's state dir, not /run/netns.
  netns_mounts_under_state_dir = true

[{cri}.containerd]
  snapshotter = {snap}
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  # runc's state in the node's dir, not /run/containerd/runc, so a killed node leaves none.
  Root = {runc_root}

[{cri}.cni]
  bin_dir = {cni_bin}
  conf_dir = {cni_conf}

[{cri}.registry]
  config_path = {certs}
"#,
        root = qp(&paths.root()),
        state = qp(&paths.state()),
        sock = qp(&paths.socket()),
        ttrpc = qp(&paths.dir.join("containerd.sock.ttrpc")),
        debug = qp(&paths.dir.join("debug.sock")),
        opt = qp(&paths.dir.join("opt")),
        pause = q(PAUSE_IMAGE),
        snap = q(snapshotter),
        cni_bin = qp(cni_bin),
        cni_conf = qp(&paths.cni().join("net.d")),
        certs = qp(&paths.certs_d()),
        runc_root = qp(&paths.dir.join("runc")),
    )
}

/// `hosts.toml` for a plain-HTTP loopback registry at `host` (`127.0.0.1:PORT`).
pub(crate) fn hosts_toml(host: &str) -> String {
    let url = format!("http://{host}");
    format!(
        "server = {}\n\n[host.{}]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n",
        q(&url),
        q(&url)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_valid_toml_with_every_path_inside_the_node_dir() {
        let paths = NodePaths {
            dir: PathBuf::from("/tmp/podward-e2e-x\"y"),
        };
        let text = containerd_toml(&paths, "overlayfs", Path::new("/usr/lib/cni"));
        let v: toml::Table = toml::from_str(&text).expect("valid toml");
        assert_eq!(v["root"].as_str(), Some("/tmp/podward-e2e-x\"y/root"));
        let cri = &v["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(cri["restrict_oom_score_adj"].as_bool(), Some(true));
        assert_eq!(cri["sandbox_image"].as_str(), Some(PAUSE_IMAGE));
        assert_eq!(v["metrics"]["address"].as_str(), Some(""));
        let h: toml::Table = toml::from_str(&hosts_toml("127.0.0.1:5000")).expect("hosts");
        assert_eq!(h["server"].as_str(), Some("http://127.0.0.1:5000"));
    }
}
