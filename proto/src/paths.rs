//! Default socket paths. Each daemon serves one of these and dials the others, so they are
//! defined once: a daemon's default for its own socket is its peers' default for dialling it.

/// containerd's CRI and native API socket (containerd's own default).
pub const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";

/// The shim's CRI socket, where kubelet's `--container-runtime-endpoint` points.
pub const CRI_SOCKET: &str = "/run/podward/cri.sock";

/// The shim's `podward.shim.v1.Lifecycle` socket.
pub const SHIM_SOCKET: &str = "/run/podward/shim.sock";

/// The prober's `podward.prober.v1.Prober` socket.
pub const PROBER_SOCKET: &str = "/run/podward/prober.sock";

/// The housekeeper's `podward.housekeeper.v1.Housekeeper` socket.
pub const HOUSEKEEPER_SOCKET: &str = "/run/podward/housekeeper.sock";
