//! gRPC message size limits. tonic's default (4 MiB in, unlimited out) fits neither of the two
//! kinds of peer podward talks to, and each client used to pick its own number.

/// Largest CRI message a podward client sends or accepts from containerd. containerd's gRPC
/// server receives and sends at most 16 MiB (`defaults.DefaultMaxRecvMsgSize` /
/// `DefaultMaxSendMsgSize`) and kubelet's CRI client uses the same 16 MiB (`maxMsgSize` in
/// `k8s.io/cri-client`), so a larger limit buys nothing and a smaller one would refuse a List
/// that kubelet accepts.
pub const CRI_MESSAGE_BYTES: usize = 16 << 20;

/// Largest message on podward's own APIs. A `Lifecycle` snapshot is the whole node in one
/// message: 10,000 containers with kubelet's annotations pass 16 MiB, and a subscriber that
/// cannot take the snapshot can never resync. The shim builds snapshots from what containerd
/// already holds, so the size follows the node, not a client.
pub const API_MESSAGE_BYTES: usize = 256 << 20;
