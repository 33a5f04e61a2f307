//! The shutdown signal: SIGTERM (what kubelet and systemd send) or SIGINT (an operator's ^C).

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Installs the SIGTERM and SIGINT handlers at once and returns a future that resolves on the
/// first of them. The handlers must be in place before a daemon serves anything: a supervisor
/// may send SIGTERM the moment `/healthz` answers, and a signal that arrives before they are
/// installed takes the default action (the process dies without a clean exit). So this is not an
/// `async fn`, whose body (and the installation) would wait for the first poll. Call it inside
/// the Tokio runtime. If the handlers cannot be installed (only when the runtime has no signal
/// driver) the future never resolves and logs why.
pub fn shutdown() -> impl Future<Output = ()> + Send + 'static {
    let handlers = signal(SignalKind::terminate())
        .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)));
    async move {
        let Ok((mut term, mut int)) = handlers else {
            tracing::error!("cannot install signal handlers; SIGTERM will not stop this process");
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
            _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nix::sys::signal::{Signal, raise};

    use super::*;

    /// A SIGTERM between the call and the first poll (a daemon still starting up) must be
    /// caught, not kill the process. nextest runs each test in its own process, so without the
    /// handlers in place this test dies of the signal.
    #[tokio::test]
    async fn a_sigterm_before_the_first_poll_is_caught_and_resolves_it() {
        let stop = shutdown();
        raise(Signal::SIGTERM).expect("raise SIGTERM");
        tokio::time::timeout(Duration::from_secs(5), stop)
            .await
            .expect("the shutdown future resolves on the SIGTERM sent before it was polled");
    }
}
