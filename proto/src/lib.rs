//! podward's wire contract and its edges.
//!
//! - [`cri`]: the CRI `runtime.v1` types, clients and servers (from the `k8s-cri` crate);
//! - [`containerd`]: containerd's own API (from `containerd-client`), used for its event stream;
//! - [`shim`], [`prober`], [`housekeeper`]: podward's own gRPC services;
//! - [`socket`]: serving and dialling unix sockets safely;
//! - [`labels`]: the label and annotation keys kubelet writes;
//! - [`paths`]: the default socket paths all three daemons agree on;
//! - [`limits`]: gRPC message size limits, each with its reason;
//! - [`tolerant`]: decoding CRI answers so that one invalid string costs that string (or that
//!   object), never the whole answer;
//! - [`outside_text`]: file names, annotation text and container output made fit for a terminal,
//!   a log line or the wire, in one place;
//! - [`backoff`]: the one retry schedule every reconnect loop uses;
//! - [`daemon`]: what every podward process shares at its edge (config layering, logs, admin
//!   HTTP endpoint, shutdown signal).
#![forbid(unsafe_code)]

pub mod backoff;
pub mod daemon;
pub mod labels;
pub mod limits;
pub mod mountinfo;
pub mod outside_text;
pub mod paths;
pub mod socket;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
pub mod time;
pub mod tolerant;
pub mod wire;

/// CRI `runtime.v1` (types, `RuntimeServiceClient`, `ImageServiceClient`, servers).
pub mod cri {
    pub use k8s_cri::v1::*;
}

/// containerd's native API (events, tasks, containers...).
pub use containerd_client as containerd;

/// `podward.shim.v1`: the shim's Lifecycle API.
pub mod shim {
    /// Version 1 of the Lifecycle API.
    #[allow(missing_docs, unreachable_pub, clippy::all)]
    pub mod v1 {
        tonic::include_proto!("podward.shim.v1");
    }
}

/// `podward.prober.v1`: the prober's Status/Watch API.
pub mod prober {
    /// Version 1 of the Prober API.
    #[allow(missing_docs, unreachable_pub, clippy::all)]
    pub mod v1 {
        tonic::include_proto!("podward.prober.v1");
    }
}

/// `podward.housekeeper.v1`: the housekeeper's Plan/Reconcile/Status API.
pub mod housekeeper {
    /// Version 1 of the Housekeeper API.
    #[allow(missing_docs, unreachable_pub, clippy::all)]
    pub mod v1 {
        tonic::include_proto!("podward.housekeeper.v1");
    }
}
