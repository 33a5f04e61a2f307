//! The descriptors a stage keeps: each stage closes or lets go of everything the stages after
//! it must not hold (nothing of the prober may reach the container).

use std::fs::File;
use std::os::fd::RawFd;

use super::failure::{Res, err};
use crate::direct_exec::sys;

/// Closes every descriptor from 3 up but `keep`.
pub(super) fn close_all_but(keep: &[RawFd]) -> Res<()> {
    let mut keep: Vec<u32> = keep.iter().filter_map(|k| u32::try_from(*k).ok()).collect();
    keep.sort_unstable();
    let mut first = 3u32;
    for k in keep.into_iter().filter(|k| *k >= 3) {
        if k > first {
            sys::close_range(first, k - 1).map_err(err("close_range"))?;
        }
        first = first.max(k + 1);
    }
    sys::close_range(first, u32::MAX).map_err(err("close_range"))
}

/// Points stdout and stderr at `/dev/null`, so this process does not hold the probe's pipes.
pub(super) fn release_stdio(devnull: &File) -> Res<()> {
    nix::unistd::dup2_stdout(devnull).map_err(err("dup2 stdout"))?;
    nix::unistd::dup2_stderr(devnull).map_err(err("dup2 stderr"))
}
