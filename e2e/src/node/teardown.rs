//! Synchronous teardown steps run from `Drop` (also while a test panics).

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::cri::{ListPodSandboxRequest, RemovePodSandboxRequest, StopPodSandboxRequest};

/// Stops and removes every sandbox (and so every container) through CRI, the clean way: the
/// shims exit, unmount the rootfs and remove their sockets.
///
/// Drop cannot await, and the test's runtime may be single-threaded and busy dropping us, so
/// this runs on a fresh thread with its own runtime and is joined.
pub(super) fn remove_all_sandboxes(socket: &Path) {
    let socket = socket.to_owned();
    let worker = std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::warn!(error = %e, "teardown runtime");
                return;
            }
        };
        rt.block_on(async move {
            let cleanup = async {
                let ch = podward_api::socket::connect(socket).await.ok()?;
                let mut rt = RuntimeServiceClient::new(ch);
                let list = rt
                    .list_pod_sandbox(ListPodSandboxRequest::default())
                    .await
                    .ok()?;
                for sb in list.into_inner().items {
                    let id = sb.id;
                    if let Err(e) = rt
                        .stop_pod_sandbox(StopPodSandboxRequest {
                            pod_sandbox_id: id.clone(),
                        })
                        .await
                    {
                        tracing::warn!(sandbox = %id, error = %e, "teardown: StopPodSandbox");
                    }
                    if let Err(e) = rt
                        .remove_pod_sandbox(RemovePodSandboxRequest {
                            pod_sandbox_id: id.clone(),
                        })
                        .await
                    {
                        tracing::warn!(sandbox = %id, error = %e, "teardown: RemovePodSandbox");
                    }
                }
                Some(())
            };
            if tokio::time::timeout(Duration::from_secs(30), cleanup)
                .await
                .is_err()
            {
                tracing::warn!("teardown: removing sandboxes timed out; killing instead");
            }
        });
    });
    let _ = worker.join();
}

/// SIGTERM, then SIGKILL after `grace`; always reaps.
pub(super) fn stop_child(child: &mut Child, grace: Duration) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}
