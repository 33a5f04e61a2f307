//! podward's end-to-end test harness: real parts, no mocks.
//!
//! - [`TestNode`]: a real containerd (with runc) in a fresh temporary root, its own socket, its own
//!   cgroup parent, and locally built OCI images ([`BUSYBOX_IMAGE`], [`PAUSE_IMAGE`]) imported;
//!   dropping it removes every sandbox, process, mount, cgroup and file it created.
//! - [`Driver`] / [`Pod`]: a small kubelet: runs pods over CRI with kubelet's labels and
//!   annotations and restarts exited containers by their restart policy.
//! - [`Daemon`]: a podward binary ([`bin_path`]) run as a child process.
//! - [`apiserver::MockApiServer`]: a Kubernetes API server stand-in on loopback (pods, their
//!   status, events) that the prober's kube-rs client talks to through a kubeconfig.
//! - [`go_client`]: a CRI client on gRPC-Go (kubelet's stack), built from Debian's packages.
//!
//! Tests need root (the development machines and CI run as root).
//!
//! ```no_run
//! use std::time::Duration;
//! use podward_e2e::{ContainerSpec, Driver, PodSpec, TestNode};
//!
//! # async fn example() -> Result<(), podward_e2e::HarnessError> {
//! let node = TestNode::start().await?;
//! // Point the driver at containerd, or at a podward-shim started on a socket in node.dir().
//! let driver = Driver::connect(&node.containerd_socket()).await?;
//! let spec = PodSpec::new("web")
//!     .annotation("podward.io/probes", r#"{"web": {"livenessProbe": {"exec": {"command": ["true"]}}}}"#)
//!     .container(ContainerSpec::new("web", &["httpd", "-f", "-p", "8080"]).port("http", 8080));
//! let pod = driver.run_pod(&node, spec).await?;
//! let out = pod.exec_sync("web", &["echo", "hi"], Duration::from_secs(5)).await?;
//! assert_eq!(out.stdout, b"hi\n");
//! pod.delete().await?;
//! # Ok(()) }
//! ```
//!
//! Nodes are independent (own temp dir, socket, cgroup parent, bridge and /24), so tests run
//! in parallel. The images are built once per machine into [`image_cache_dir`]. A node whose
//! test process was killed before `Drop` ran is swept by the next [`TestNode::start`].

pub mod apiserver;
mod binaries;
mod cleanup;
mod clients;
mod daemon;
mod driver;
mod error;
mod images;
mod lock;
mod logging;
mod net;
mod node;

pub use binaries::bin_path;
pub use cleanup::{Footprint, proc_cmdline};
pub use clients::{cri_proto, go_client};
pub use daemon::{Daemon, DaemonOutput};
pub use driver::{
    ContainerPort, ContainerSpec, Driver, Pod, PodSpec, QosClass, RestartPolicy, SecurityContext,
    kubelet_cgroup_parent,
};
pub use error::HarnessError;
pub use images::{BUSYBOX_IMAGE, ImageSet, PAUSE_IMAGE, image_cache_dir};
pub use logging::init_test_logging;
pub use net::{free_port, http_get};
pub use node::TestNode;

/// The CRI and containerd clients tests talk with (re-exported so tests need no direct dependency).
pub use podward_api::cri;
