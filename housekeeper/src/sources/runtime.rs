//! The runtime as containerd's CRI plugin reports it (read directly, not through the shim): every
//! sandbox and container in every state, the cgroup driver it runs containers with
//! (`RuntimeConfig`), and the two CRI calls the housekeeper makes to remove what leaked.
//!
//! The view a pass decides on is `view.rs` ([`RuntimeView`], built by [`view_from`]); the client
//! that fills it and makes the calls is `client.rs`.

mod client;
mod view;

pub use self::client::{RuntimeClient, RuntimeError, answer_from};
pub use self::view::{ContainerInfo, ContainerPhase, RuntimeView, SandboxInfo, view_from};
