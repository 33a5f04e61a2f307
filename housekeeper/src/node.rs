//! The node layer: the things on the node's filesystem the housekeeper finds and removes, and the
//! one place that says which outside names are kubelet's.
//!
//! [`cgroup`] (pod cgroups, both drivers, v1 and v2), [`pod_dir`] (pod directories), [`log_dir`]
//! (pod log directories), [`mounts`] (the mount table), [`procs`] (process states) and
//! [`fs_error`] (their shared error) know paths and syscalls, not policy: every function takes
//! its root path, and none imports anything above this layer. [`kubelet_names`] is the one place
//! that says which names are kubelet's: nothing else is ever acted on.

pub mod cgroup;
pub mod fs_error;
pub mod kubelet_names;
pub mod log_dir;
pub mod mounts;
pub mod pod_dir;
pub mod procs;
