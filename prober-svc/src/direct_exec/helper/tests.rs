use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};

use super::*;

/// A process standing in for a forked helper, and the prober's and the helper's ends of a
/// control socket on which the helper's pidfd (the first word) has already been sent.
fn helper_that_sent_its_pidfd() -> (
    std::process::Child,
    std::os::unix::net::UnixStream,
    std::os::unix::net::UnixStream,
) {
    let child = Command::new("sleep").arg("60").spawn().expect("sleep");
    let pidfd = sys::pidfd_open(child.id() as i32).expect("pidfd_open");
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    sendmsg::<()>(
        theirs.as_raw_fd(),
        &[IoSlice::new(b"p")],
        &[ControlMessage::ScmRights(&[pidfd.as_raw_fd()])],
        MsgFlags::empty(),
        None,
    )
    .expect("send the pidfd");
    ours.set_nonblocking(true).expect("nonblocking");
    (child, ours, theirs)
}

/// How `child` ended, waited for at most `within`.
async fn ended(mut child: std::process::Child, within: Duration) -> Option<i32> {
    tokio::time::timeout(within, async {
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status.signal();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        let _ = child.kill();
        None
    })
}

#[tokio::test]
async fn a_forked_helper_dropped_before_its_pidfd_was_read_is_ended_once_it_is() {
    let (child, ours, _theirs) = helper_that_sent_its_pidfd();
    let process = Process::forked(ours);
    drop(process);
    assert_eq!(
        ended(child, Duration::from_secs(3)).await,
        Some(libc::SIGTERM),
        "told the probe is over, as at a probe's end"
    );
}

#[tokio::test]
async fn a_forked_helper_ended_before_its_pidfd_came_is_told_when_it_comes() {
    let (child, ours, _theirs) = helper_that_sent_its_pidfd();
    let mut process = Process::forked(ours);
    assert!(process.awaits_pidfd());
    process.end();
    let how = tokio::time::timeout(Duration::from_secs(3), process.exited())
        .await
        .expect("the helper's exit");
    assert_eq!(how.as_deref(), Some("exited"));
    assert_eq!(
        ended(child, Duration::from_secs(3)).await,
        Some(libc::SIGTERM)
    );
}
